"""An election does not wait for the primary it stopped hearing from (issue 30: a stopped or
cut-off primary keeps its connections open, and waiting for its answers to time out made a
failover take 7.5 s instead of 3). `TopicReplica._poll` is driven with stand-in peers on
Trio's MockClock, so the times asserted are virtual and exact."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from trionsq.nsqd.replication.topic import TopicReplica

SILENT_PRIMARY = 1


def peer(node_id: int) -> Any:
    return SimpleNamespace(node_id=node_id)


def asker(answers: dict[int, tuple[float, bool] | None]) -> Any:
    """`ask` answering each node after a delay (None: never, like a stopped process)."""

    async def ask(p: Any) -> bool:
        answer = answers[p.node_id]
        if answer is None:
            await trio.sleep_forever()
        assert answer is not None
        await trio.sleep(answer[0])
        return answer[1]

    return ask


def candidate(primary: int | None = SILENT_PRIMARY, before: int | None = None) -> Any:
    return SimpleNamespace(primary=primary, primary_before=before)


async def poll(replica: Any, answers: dict[int, tuple[float, bool] | None], need: int) -> Any:
    start = trio.current_time()
    peers = [peer(n) for n in answers]
    yes = await TopicReplica._poll(replica, peers, asker(answers), need)
    return yes, trio.current_time() - start


async def test_a_quorum_of_yeses_ends_the_poll(autojump_clock: trio.testing.MockClock) -> None:
    answers = {SILENT_PRIMARY: None, 2: (0.01, True), 3: (0.02, True)}
    assert await poll(candidate(), answers, need=1) == (1, 0.01)


async def test_the_silent_primary_is_not_waited_for(autojump_clock: trio.testing.MockClock) -> None:
    answers = {SILENT_PRIMARY: None, 2: (0.01, False)}
    assert await poll(candidate(), answers, need=1) == (0, 0.01)
    # A candidate has forgotten the primary (`primary` None): the one before is not waited
    # for either.
    assert await poll(candidate(None, SILENT_PRIMARY), answers, need=1) == (0, 0.01)


async def test_the_primary_alone_is_waited_for(autojump_clock: trio.testing.MockClock) -> None:
    """In a set of two, only the primary can answer: its answer is needed."""
    answers: dict[int, tuple[float, bool] | None] = {SILENT_PRIMARY: (0.5, True)}
    assert await poll(candidate(), answers, need=1) == (1, 0.5)


async def test_a_live_primary_that_answers_counts(autojump_clock: trio.testing.MockClock) -> None:
    """A primary whose lease ran out answers yes (it is alive, just cut off from the others)."""
    answers = {SILENT_PRIMARY: (0.01, True), 2: (0.3, False)}
    assert await poll(candidate(), answers, need=1) == (1, 0.01)
    answers = {SILENT_PRIMARY: (0.01, True), 2: (0.3, True)}
    assert await poll(candidate(), answers, need=2) == (2, 0.3)
