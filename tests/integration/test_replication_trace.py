"""Trace validation in process (docs/replication.md "Trace validation"): three members with
``--replication-trace-file``, in one Trio run as in test_replication.py, publishing, consuming,
a kill of the primary and a partition of it, then their traces replayed against the spec by
spec/trace_check.py; and a deliberately broken member (it acknowledges a publish before a
quorum has it) whose trace the checker rejects at that acknowledgement."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio

from spec import trace_check
from tests.integration.test_replication import (
    Cluster,
    consume,
    drain,
    proxied,
    publish,
    publish_loop,
    settled_primary,
)
from trionsq.nsqd.replication.topic import TopicReplica


def traced(cluster: Cluster, root: Path) -> list[Path]:
    """Give each member a trace file; their paths."""
    paths = []
    for i, options in enumerate(cluster.options):
        path = root / f"n{i + 1}.trace"
        cluster.options[i] = dataclasses.replace(options, replication_trace_file=str(path))
        paths.append(path)
    return paths


def check(paths: list[Path]) -> trace_check.Report:
    report = trace_check.check_files(paths)
    print(report.summary())
    return report


async def test_the_traces_of_a_failover_follow_the_spec(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        paths = traced(cluster, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        bodies = [b"m%d" % i for i in range(30)]
        assert await publish(n1, "rt", bodies) == bodies
        finished = await consume(n1, "rt", 10)
        await trio.sleep(0.3)  # the FIN batch reaches the replicas
        cluster.crash(0)
        await cluster.until(lambda: cluster.primary("rt") in (1, 2))
        new = cluster.nodes[cluster.primary("rt")]  # type: ignore[index]
        assert new is not None
        assert sorted(await consume(new, "rt", 20)) == sorted(set(bodies) - set(finished))
        await cluster.start(0)  # back as a replica of the new epoch
        leader = await settled_primary(cluster, "rt")
        assert await publish(leader, "rt", [b"after"]) == [b"after"]
        await trio.sleep(0.3)
        cluster.stop()
    report = check(paths)
    assert report.ok, report.summary()
    counts = report.counts
    assert counts["take_office"] >= 2 and counts["promise"] >= 2 and counts["join"] >= 3
    assert counts["ack"] >= 2 and counts["fins_sent"] >= 1 and counts["fins"] >= 1
    assert counts["start"] == 4  # three members, one restarted


async def test_the_traces_of_a_partition_follow_the_spec(tmp_path: Path) -> None:
    """The primary's links to the others dropped under publishing: it steps down at its
    lease, the others elect, and healed it joins the new epoch."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        paths = traced(cluster, tmp_path)
        proxies = await proxied(nursery, cluster)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, "rt", [b"first"]) == [b"first"]
        acked: set[bytes] = {b"first"}
        stop = trio.Event()
        nursery.start_soon(publish_loop, cluster, "rt", acked, stop, "p")
        await trio.sleep(0.5)
        for (i, j), proxy in proxies.items():
            if 0 in (i, j):
                proxy.set("drop")
        await cluster.until(lambda: cluster.role(0, "rt") != "primary", 5)
        await cluster.until(lambda: cluster.primary("rt") in (1, 2), 10)
        before = len(acked)
        await cluster.until(lambda: len(acked) > before + 10, 10)
        for proxy in proxies.values():
            proxy.set("pass")
        leader = await settled_primary(cluster, "rt")
        stop.set()
        await trio.sleep(0.2)
        expected = set(acked)
        assert expected <= await drain(leader, "rt", expected)
        cluster.stop()
        nursery.cancel_scope.cancel()
    report = check(paths)
    assert report.ok, report.summary()
    assert report.counts["take_office"] >= 2 and report.counts["step_down"] >= 2


@pytest.mark.parametrize("broken", [False, True], ids=["correct", "ack-before-quorum"])
async def test_the_checker_catches_an_acknowledgement_before_a_quorum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    """The seeded bug: the primary's quorum total counts only itself (every message it has
    accepted), so a PUB is answered OK before any member has it (the spec's
    ``ack_before_replicated`` mutant). The correct run's traces pass; the broken one's are
    rejected at the primary's first acknowledgement after the bug, by the rule "an
    acknowledged message was written by a quorum"."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path)
        paths = traced(cluster, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, "rt", [b"before"]) == [b"before"]
        leader = await settled_primary(cluster, "rt")
        recorder = leader.replication.trace  # type: ignore[union-attr]
        from_seq = recorder.seq
        if broken:
            monkeypatch.setattr(TopicReplica, "quorum_total", lambda self: self.accepted)
        bodies = [b"m%d" % i for i in range(5)]
        assert await publish(leader, "rt", bodies) == bodies
        await trio.sleep(0.2)
        cluster.stop()
    report = check(paths)
    if not broken:
        assert report.ok, report.summary()
        return
    violation = report.violation
    assert violation is not None, report.summary()
    node = leader.options.node_id
    steps = trace_check.read_trace(paths[node - 1])
    first_ack = next(s for s in steps if s.ev == "ack" and s.seq >= from_seq)
    assert violation.rule == trace_check.ACK_QUORUM
    assert (violation.step.node, violation.step.seq) == (node, first_ack.seq)
    assert "of the 2 a quorum needs" in violation.detail
