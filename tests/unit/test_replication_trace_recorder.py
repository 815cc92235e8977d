"""The replication trace's recorder (trionsq/nsqd/replication/trace.py): lines buffered and
written at a change of role or epoch, sequence numbers continued across restarts, a torn tail
completed, acknowledgements recorded as they grow, a failing disk turning tracing off."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spec import trace_check
from trionsq.nsqd.replication import trace
from trionsq.nsqd.replication.trace import TraceRecorder


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def replica(role: str = "replica", epoch: int = 0, **members: int) -> Any:
    acked = {int(k[1:]): SimpleNamespace(acked=v) for k, v in members.items()}
    return SimpleNamespace(name="rt", role=role, epoch=epoch, members=acked)


def recorder(path: Path, node: int = 1) -> TraceRecorder:
    return TraceRecorder(str(path), node, members=3, degraded="refuse")


def test_steps_are_buffered_and_role_changes_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "n1.trace"
    rec = recorder(path)
    assert [line["ev"] for line in lines(path)] == ["start"]
    start = lines(path)[0]
    assert start["node"] == 1 and start["seq"] == 0 and start["members"] == 3
    rec.record(replica("primary", 1025), "wrote", sender=1, total=3)
    assert len(lines(path)) == 1  # buffered
    rec.record(replica("replica", 2050), "step_down", was="primary", why="lease")
    written = lines(path)
    assert [line["ev"] for line in written] == ["start", "wrote", "step_down"]
    assert written[1] == {
        **written[1],
        "seq": 1,
        "topic": "rt",
        "role": "primary",
        "epoch": 1025,
        "total": 3,
    }
    rec.record(replica(), "fins", sender=2, of=2050, count=1)
    rec.close()
    assert [line["ev"] for line in lines(path)][-2:] == ["fins", "stop"]
    rec.record(replica(), "fins", sender=2, of=2050, count=1)  # closed: dropped
    assert len(lines(path)) == 5


def test_a_restart_continues_the_sequence_after_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "n1.trace"
    rec = recorder(path)
    rec.record(replica(), "load", saved=False)
    rec.flush()
    with open(path, "a") as f:
        f.write('{"node":1,"seq":2,"wall"')  # killed while writing
    again = recorder(path)
    assert again.seq == 3  # its start line is numbered 2
    again.record(replica(), "load", saved=True)
    again.close()
    text = path.read_text()
    assert '"wall"\n{"node":1,"seq":2' in text
    notes: list[str] = []
    steps = trace_check.read_trace(path, notes)
    assert [s.seq for s in steps] == [0, 1, 2, 3, 4] and len(notes) == 1


def test_acknowledgements_are_recorded_as_they_grow(tmp_path: Path) -> None:
    path = tmp_path / "n1.trace"
    rec = recorder(path)
    primary = replica("primary", 1025, n2=4, n3=2)
    rec.acknowledged(primary, -1)  # no quorum
    rec.acknowledged(primary, 4)
    rec.acknowledged(primary, 3)
    rec.acknowledged(primary, 4)
    rec.acknowledged(replica("primary", 2049, n2=1), 1)  # a new epoch starts again
    rec.close()
    acks = [line for line in lines(path) if line["ev"] == "ack"]
    assert [(a["epoch"], a["pos"]) for a in acks] == [(1025, 4), (2049, 1)]
    assert acks[0]["members"] == {"2": 4, "3": 2}


def test_a_failing_disk_turns_tracing_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rec = recorder(tmp_path / "n1.trace")

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    rec.record(replica("candidate", 1025), "stand", force=False)
    assert rec.closed and "turned off" in caplog.text
    rec.record(replica("primary", 1025), "take_office", doubled=False, pos=0)
    rec.close()


def test_off_without_the_flag(tmp_path: Path) -> None:
    options = SimpleNamespace(replication_trace_file="", node_id=1, replication_degraded="refuse")
    assert trace.open_trace(options, 3) is None  # type: ignore[arg-type]
    options.replication_trace_file = str(tmp_path / "t")
    rec = trace.open_trace(options, 3)  # type: ignore[arg-type]
    assert rec is not None and rec.path == str(tmp_path / "t")
    rec.close()
