"""`FlushWhenIdle` (trionsq/nsqd/replication_batching.py): replicated publishes are flushed
when the event loop goes idle, or once the oldest waited MAX_DELAY while it stays busy; a
failing flush does not stop the others."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from trionsq.nsqd.replication.batching import MAX_DELAY, FlushWhenIdle


class FakeReplica:
    def __init__(self, name: str, fail: bool = False, exiting: bool = False) -> None:
        self.name = name
        self.topic = SimpleNamespace(exiting=exiting)
        self.flushes = 0
        self.fail = fail

    def end_of_batch(self) -> None:
        self.flushes += 1
        if self.fail:
            raise RuntimeError("boom")


def test_flushed_when_the_loop_goes_idle() -> None:
    batching = FlushWhenIdle()
    replica = FakeReplica("a")
    batching.schedule(replica)  # type: ignore[arg-type]
    batching.schedule(replica)  # type: ignore[arg-type]
    batching.before_io_wait(0.0)  # busy, and not yet MAX_DELAY: waits
    assert replica.flushes == 0
    batching.before_io_wait(0.5)  # about to block: flushed, once
    assert replica.flushes == 1
    batching.before_io_wait(0.5)
    assert replica.flushes == 1


def test_flushed_after_max_delay_while_the_loop_stays_busy() -> None:
    batching = FlushWhenIdle()
    replica = FakeReplica("a")
    batching.schedule(replica)  # type: ignore[arg-type]
    time.sleep(MAX_DELAY * 2)
    batching.before_io_wait(0.0)
    assert replica.flushes == 1


def test_a_failing_flush_is_logged_and_the_others_still_flush(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batching = FlushWhenIdle()
    replicas: list[Any] = [
        FakeReplica("a", fail=True),
        FakeReplica("b"),
        FakeReplica("c", exiting=True),
    ]
    for replica in replicas:
        batching.schedule(replica)
    batching.before_io_wait(1.0)
    assert [r.flushes for r in replicas] == [1, 1, 0]
    assert "REPLICATION(a): flush failed" in caplog.text
