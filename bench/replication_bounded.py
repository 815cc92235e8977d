"""Does a replica's log stay bounded (issue 30, finding 2)? Three nsqd processes replicate one
topic for `--seconds` without a fault while a publisher sends `--rate` PUBs a second (to the
primary) and a consumer FINishes every message; every `--every` seconds each member's log
(records, from /stats), its files' sizes (log, FIN, dropped) and its RSS are printed. Before
issue 30 only the primary compacted: each replica's log grew with the topic's history (24,422
records after 120 s at ~200/s, RSS 53 -> 60 MiB) while the primary's stayed at a few hundred.

    .venv/bin/python bench/replication_bounded.py --seconds 120 --rate 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conformance.nsq_conn import NSQConn  # noqa: E402
from trionsq.protocol import FRAME_TYPE_RESPONSE, pub  # noqa: E402
from trionsq.testing import DaemonProcess, free_ports, pythonpath_env  # noqa: E402

TOPIC = "bounded"


def start_members(root: Path) -> list[tuple[DaemonProcess, int, int]]:
    ports = free_ports(6)
    tcp, http = ports[:3], ports[3:]
    members = []
    for i in range(3):
        data = root / f"n{i + 1}"
        data.mkdir()
        peers = [f"--replicate-to=127.0.0.1:{tcp[j]}" for j in range(3) if j != i]
        args = [
            f"--node-id={i + 1}",
            f"--tcp-address=127.0.0.1:{tcp[i]}",
            f"--http-address=127.0.0.1:{http[i]}",
            f"--replicate-topic={TOPIC}",
            "--replication-secret=bench",
            *peers,
        ]
        process = DaemonProcess("nsqd", args=args, data_path=str(data), env=pythonpath_env())
        members.append((process, tcp[i], http[i]))
    return members


def replication_stats(http: int) -> dict[str, Any] | None:
    try:
        stats = httpx.get(f"http://127.0.0.1:{http}/stats?format=json", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return None
    for topic in stats.get("topics", []):
        if topic["topic_name"] == TOPIC:
            return topic.get("replication")
    return None


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def file_sizes(data: str) -> tuple[int, int, int]:
    log = fin = dropped = 0
    for name in os.listdir(data):
        size = os.path.getsize(os.path.join(data, name))
        if name.endswith(".replication.log"):
            log += size
        elif name.endswith(".replication.fin"):
            fin += size
        elif name.endswith(".replication.dropped"):
            dropped += size
    return log, fin, dropped


def publish(tcp: int, rate: float, until: float, counts: list[int]) -> None:
    conn = NSQConn(("127.0.0.1", tcp))
    next_at = time.monotonic()
    while time.monotonic() < until:
        conn.send(pub(TOPIC, b"x" * 100))
        if conn.read_frame()[0] == FRAME_TYPE_RESPONSE:
            counts[0] += 1
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))
    conn.sock.close()


def consume(tcp: int, until: float, counts: list[int]) -> None:
    conn = NSQConn(("127.0.0.1", tcp))
    conn.sub(TOPIC, "c")
    conn.rdy(100)
    while time.monotonic() < until + 2:
        message = conn.try_read_message(0.5)
        if message is not None:
            conn.fin(message.id)
            counts[1] += 1
    conn.sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--every", type=float, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bounded-") as tmp:
        members = start_members(Path(tmp))
        try:
            # The publisher creates the topic on node 1, which stands at once.
            first = NSQConn(("127.0.0.1", members[0][1]), timeout=30)
            first.pub(TOPIC, b"first")  # answered OK once the first election is over
            first.sock.close()
            primary = None
            deadline = time.monotonic() + 30
            while primary is None and time.monotonic() < deadline:
                for member in members:
                    state = replication_stats(member[2])
                    if state and state.get("role") == "primary":
                        primary = member
                time.sleep(0.2)
            assert primary is not None, "no primary within 30 s"
            counts = [0, 0]
            start = time.monotonic()
            until = start + args.seconds
            heads = "  ".join(
                f"n{i + 1}:role records log_KiB fin_KiB drop_KiB RSS_MiB" for i in range(3)
            )
            print(f"{'t(s)':>6} {'published':>9} {'finished':>8}  {heads}")
            workers = [
                threading.Thread(target=publish, args=(primary[1], args.rate, until, counts)),
                threading.Thread(target=consume, args=(primary[1], until, counts)),
            ]
            for worker in workers:
                worker.start()
            while time.monotonic() < until + 2:
                time.sleep(args.every)
                row = [f"{time.monotonic() - start:6.0f} {counts[0]:9d} {counts[1]:8d}"]
                for process, _, http in members:
                    state = replication_stats(http) or {}
                    log_b, fin_b, drop_b = file_sizes(process.data_path or "")
                    row.append(
                        f"{str(state.get('role', '?'))[:7]:>7} {state.get('log_messages', -1):7d}"
                        f" {log_b / 1024:7.0f} {fin_b / 1024:7.0f} {drop_b / 1024:8.0f}"
                        f" {rss_mib(process.proc.pid):7.1f}"
                    )
                print("  ".join(row), flush=True)
            for worker in workers:
                worker.join()
            print(json.dumps({"published": counts[0], "finished": counts[1]}))
        finally:
            for process, _, _ in members:
                process.kill()


if __name__ == "__main__":
    main()
