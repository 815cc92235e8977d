"""`bench/round_trip.py` end to end against trionsq alone, with tiny counts: both workloads
run, every figure comes out in the table and the JSON line, and the counts are what the
workloads do (one write per PUB answered; an OK and a delivery per message of the cycle). No
timing assertions (shared noisy machine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "round_trip.py")


def _run(*argv: str) -> tuple[list[str], dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--rounds=1", "--count=300", "--json", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    return lines[:-1], json.loads(lines[-1])


def test_both_workloads_give_every_figure() -> None:
    table, doc = _run()
    assert set(doc["medians"]) == {"pub", "cycle"}
    for workload in ("pub", "cycle"):
        figures = doc["medians"][workload]["trionsq"]
        assert figures["rate"] > 0 and figures["rate_median"] > 0
        assert 0 < figures["p50_us"] <= figures["p99_us"]
        assert figures["cpu_us"] >= 0 and figures["switches"] >= 0
        assert "go" not in doc["medians"][workload]
        assert any(line.startswith(f"{workload}: daemon CPU per message (µs) | ") for line in table)
    assert table[1] == "figure | trionsq"


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_syscalls_counted_per_message() -> None:
    table, doc = _run("--syscalls")
    pub = doc["medians"]["pub"]["trionsq"]
    cycle = doc["medians"]["cycle"]["trionsq"]
    # Each PUB is answered with one write of its OK (nsqd writes nothing else meanwhile);
    # a cycle adds the delivery's write. A few heartbeats may add a fraction.
    assert 1.0 <= pub["sys_write"] < 1.1
    assert 2.0 <= cycle["sys_write"] < 2.1
    assert pub["sys_total"] >= pub["sys_write"] + 1  # and at least a read per PUB
    assert any(line.startswith("pub: syscalls per message: write | 1.0") for line in table)


def test_bad_arguments_are_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--rounds=0"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("bench/round_trip.py: error: ")
