"""Hypothesis drives a live two-node replica set with the replication spec's actions
(spec/replication.py, configuration ``replication.two_nodes``) and checks the spec's
properties on what it observes.

The two nsqds run in process (tests/integration/test_replication.py's `Cluster`, short
timeouts, real clock, real TCP between them); the machine runs in a worker thread and reaches
the daemons through `trio.from_thread`. Rules are the spec's actions as a client can cause
them: `publish` (PUB to the primary), `deliver` and `finish` (a consumer takes and FINs
messages), `replicate_fins` (time for a FIN batch to reach the replica), `crash` (a daemon's
tasks cancelled without shutdown, as kill -9 leaves its files) and `restart` (with two nodes
the quorum is both: nothing takes over until the crashed node returns).

Checked: **one primary per epoch, epochs only grow** (every primary observed, in order);
**no redelivery of a FIN that reached the replicas** (a message FINed while both members were
in the epoch, and given time to reach the replica, is never delivered again); and at teardown,
**no acknowledged message is lost**: everything acknowledged and not finished is delivered by
the final primary.

    ./test tests/stateful/test_replication.py --stateful-examples 50     # a longer run
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.integration.test_replication import Cluster, publish
from tests.nsqd_harness import Conn
from trionsq.protocol import fin, rdy, sub

TOPIC = "rt"
QUICK_EXAMPLES = 4
#: Messages a consumer left unfinished come back after this.
MSG_TIMEOUT = 0.5
STEPS = 12
_runs = itertools.count()


class Live:
    """The test's nursery and temp dir, reached from the machine's thread."""

    nursery: trio.Nursery
    root: Path


class ReplicationMachine(RuleBasedStateMachine):
    live: Live

    @initialize()
    def start(self) -> None:
        root = self.live.root / f"run{next(_runs)}"
        root.mkdir()
        self.cluster = trio.from_thread.run(self._start, root)
        self.acked: set[bytes] = set()
        self.finished: set[bytes] = set()
        self.durable_fins: set[bytes] = set()
        self.delivered: list[bytes] = []
        self.uncertain: set[bytes] = set()
        self.primaries: list[tuple[int, int]] = []  # (epoch, node) in the order observed
        self.down: set[int] = set()
        self.counter = 0
        self.observe()

    async def _start(self, root: Path) -> Cluster:
        cluster = Cluster(self.live.nursery, root, size=2, msg_timeout=MSG_TIMEOUT)
        await cluster.start_all()
        node = cluster.nodes[0]
        assert node is not None
        assert await publish(node, TOPIC, [b"boot"]) == [b"boot"]
        conn = await Conn.open(node)  # the channel, before any other message
        await conn.send(sub(TOPIC, "c"))
        assert await conn.response() == b"OK"
        await conn.aclose()
        return cluster

    # -- observation ------------------------------------------------------------------------

    def observe(self) -> None:
        for index in range(2):
            node = self.cluster.nodes[index]
            if node is None or TOPIC not in node.topics:
                continue
            replica = node.topics[TOPIC].replica
            if replica.role == "primary":
                entry = (replica.epoch, index)
                if not self.primaries or self.primaries[-1] != entry:
                    for epoch, other in self.primaries:
                        assert epoch != replica.epoch or other == index, (
                            f"two primaries in epoch {epoch}: nodes {other} and {index}"
                        )
                        assert epoch <= replica.epoch, (
                            f"epoch went back: {replica.epoch} after {epoch}"
                        )
                    self.primaries.append(entry)

    def primary(self) -> int | None:
        self.observe()
        for index in range(2):
            node = self.cluster.nodes[index]
            if (
                node is not None
                and TOPIC in node.topics
                and node.topics[TOPIC].replica.role == "primary"
            ):
                return index
        return None

    @invariant()
    def epochs_only_grow(self) -> None:
        if hasattr(self, "cluster"):
            self.observe()

    # -- the spec's actions ------------------------------------------------------------------

    @precondition(lambda self: not self.down)
    @rule(count=st.integers(1, 5))
    def publish(self, count: int) -> None:
        index = self._wait_primary()
        node = self.cluster.nodes[index]
        bodies = [b"m%d" % (self.counter + i) for i in range(count)]
        self.counter += count
        self.acked |= set(trio.from_thread.run(publish, node, TOPIC, bodies))

    @precondition(lambda self: not self.down)
    @rule(count=st.integers(1, 5), fin_them=st.booleans())
    def deliver(self, count: int, fin_them: bool) -> None:
        """deliver, and finish (or not: the consumer leaves, the messages are requeued)."""
        index = self._wait_primary()
        got, cut = trio.from_thread.run(self._consume, self.cluster.nodes[index], count, fin_them)
        if cut:
            # The connection closed under the consumer (its primary stepped down): whether
            # its FINs arrived is unknown, so these count neither as finished nor as owed.
            self.uncertain |= set(got)
            fin_them = False
        for body in got:
            assert body not in self.durable_fins, (
                f"{body!r} delivered again after its FIN reached the replica"
            )
        self.delivered += got
        if fin_them:
            self.finished |= set(got)

    @staticmethod
    async def _consume(
        node: Any, count: int, fin_them: bool, until: set[bytes] | None = None
    ) -> tuple[list[bytes], bool]:
        """Take up to `count` messages within 0.3 s (or, with `until`, until those arrived
        or 3 s passed), FINing them if asked; and whether the connection was cut."""
        conn = await Conn.open(node)
        await conn.send(sub(TOPIC, "c"))
        assert await conn.response() == b"OK"
        await conn.send(rdy(count))
        got: list[bytes] = []
        cut = False
        try:
            with trio.move_on_after(0.3 if until is None else 3.0 + MSG_TIMEOUT):
                while len(got) < count and (until is None or not until <= set(got)):
                    message = await conn.message()
                    got.append(bytes(message.body))
                    if fin_them:
                        await conn.send(fin(message.id))
            await trio.sleep(0.02)  # the FINs are read before the connection closes
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            cut = True
        await conn.aclose()
        return got, cut

    @precondition(lambda self: not self.down)
    @rule()
    def replicate_fins(self) -> None:
        """Time for the FIN batch (every 50 ms here) to reach the replica, both members up."""
        trio.from_thread.run(trio.sleep, 0.3)
        index = self._wait_primary()
        node = self.cluster.nodes[index]
        assert node is not None
        if len(node.topics[TOPIC].replica.members) == 1:
            self.durable_fins |= self.finished

    @precondition(lambda self: not self.down)
    @rule(index=st.integers(0, 1))
    def crash(self, index: int) -> None:
        if index == self.primary():
            # FINs not yet given the time to reach the replica die with the primary (the
            # spec: their messages may be delivered again; they need not be).
            self.uncertain |= self.finished - self.durable_fins
            self.finished &= self.durable_fins
        trio.from_thread.run_sync(self.cluster.crash, index)
        self.down.add(index)

    @precondition(lambda self: bool(self.down))
    @rule()
    def restart(self) -> None:
        index = self.down.pop()
        trio.from_thread.run(self.cluster.start, index)

    def _wait_primary(self) -> int:
        """With both members up a primary is elected within a failover timeout or two."""
        found: list[int] = []

        async def wait() -> None:
            await self.cluster.until(lambda: self.primary() is not None, 10)
            await self.cluster.until(
                lambda: all(n is not None and TOPIC in n.topics for n in self.cluster.nodes),
                10,
            )
            index = self.primary()
            assert index is not None
            found.append(index)

        trio.from_thread.run(wait)
        return found[0]

    def teardown(self) -> None:
        if not hasattr(self, "cluster"):
            return
        try:
            while self.down:
                self.restart()
            index = self._wait_primary()
            node = self.cluster.nodes[index]
            owed = (self.acked | {b"boot"}) - self.finished - self.uncertain
            got, _ = trio.from_thread.run(self._consume, node, 1000, True, owed)
            drained = set(got)
            for body in drained:
                assert body not in self.durable_fins, (
                    f"{body!r} delivered again after its FIN reached the replica"
                )
            lost = owed - drained
            assert not lost, f"acknowledged messages lost: {sorted(lost)}"
        finally:
            trio.from_thread.run_sync(self.cluster.stop)


async def test_two_node_replica_set_follows_the_spec(
    nursery: trio.Nursery, tmp_path: Path, request: Any
) -> None:
    Live.nursery = nursery
    Live.root = tmp_path
    ReplicationMachine.live = Live()
    examples = request.config.getoption("--stateful-examples") or QUICK_EXAMPLES
    await trio.to_thread.run_sync(
        functools.partial(
            run_state_machine_as_test,
            ReplicationMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=STEPS,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                print_blob=True,
                # Each step takes real time (a restart, an election): report the failing
                # sequence as found, without minutes of shrinking.
                phases=[Phase.explicit, Phase.reuse, Phase.generate],
            ),
        )
    )
