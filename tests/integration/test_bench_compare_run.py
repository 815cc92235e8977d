"""`bench/compare` end to end against trionsq alone, with tiny parameters: the figures come
out in the table and the JSON line. No timing assertions (shared noisy machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "compare")


def _run(*argv: str) -> tuple[list[str], dict[str, Any]]:
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        [SCRIPT, "--rounds=1", "--json", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    return lines[:-1], json.loads(lines[-1])


def test_throughput_one_configuration() -> None:
    table, doc = _run("--only=throughput-mem", "--runfor=1s", "--mem-queue-size=10000000")
    assert any(line.startswith("publish, memory queue (msg/s)") for line in table)
    assert any(line.startswith("deliver, memory queue (msg/s)") for line in table)
    assert set(doc["figures"]) == {"publish_mem", "deliver_mem"}
    for figure in doc["figures"].values():
        assert figure["trionsq"]["median"] > 0
        assert "go" not in figure
    assert doc["servers"]["trionsq"][-3:] == ["-m", "trionsq", "nsqd"]


def test_idle_and_connections() -> None:
    table, doc = _run(
        "--only=idle,connections",
        "--topics=20",
        "--idle-settle=0.2s",
        "--idle-window=0.5s",
        "--conns=50",
    )
    assert any(line.startswith("idle CPU, 20 topics x 2 channels") for line in table)
    assert any(line.startswith("RSS per idle connection (50)") for line in table)
    figures = doc["figures"]
    assert figures["idle_cpu"]["trionsq"]["median"] >= 0
    assert figures["idle_rss"]["trionsq"]["median"] > 0
    assert figures["idle_create"]["trionsq"]["median"] > 0
    assert figures["conn_bytes"]["trionsq"]["values"][0] is not None
