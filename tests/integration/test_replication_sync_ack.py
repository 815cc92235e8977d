"""--sync-ack with replication (docs/replication.md section 3): a publish is answered only once
a quorum has the messages fsynced, the primary's own log included, not just written."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.integration.test_replication import Cluster, publish
from trionsq.nsqd.replication import stream as replication_stream
from trionsq.nsqd.replication.log import fsync_handles


@pytest.mark.parametrize(("sync_ack", "first"), [(True, "primary"), (True, "members"), (False, "")])
async def test_sync_ack_answers_once_a_quorum_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync_ack: bool, first: str
) -> None:
    primary_may_sync = threading.Event()
    members_may_sync = trio.Event()

    def gated_fsync(fds: list[int]) -> None:
        primary_may_sync.wait(10)
        fsync_handles(fds)

    monkeypatch.setattr(replication_stream, "fsync_handles", gated_fsync)
    async with trio.open_nursery() as nursery:
        # A long lease: a member waiting in its fsync answers no heartbeat meanwhile.
        cluster = Cluster(
            nursery,
            tmp_path,
            sync_ack=sync_ack,
            replication_lease=5.0,
            replication_failover_timeout=6.0,
        )
        await cluster.start_all()
        for node in cluster.live()[1:]:
            real = node.replication.fsync_logs

            async def gated(topics: Any, real: Any = real) -> None:
                await members_may_sync.wait()
                await real(topics)

            node.replication.fsync_logs = gated
        n1 = cluster.nodes[0]
        assert n1 is not None
        answered: list[bytes] = []

        async def publisher() -> None:
            answered.extend(await publish(n1, "rt", [b"durable"]))

        nursery.start_soon(publisher)
        await trio.sleep(0.5)
        if not sync_ack:
            # Without it, written on a quorum is enough: neither fsync is waited for.
            assert answered == [b"durable"]
        else:
            assert answered == []
            if first == "primary":
                primary_may_sync.set()
            else:
                members_may_sync.set()
            await trio.sleep(0.3)
            assert answered == []  # the other side has not fsynced
            primary_may_sync.set()
            members_may_sync.set()
            await cluster.until(lambda: answered == [b"durable"], 3)
        primary_may_sync.set()
        members_may_sync.set()
        cluster.stop()
