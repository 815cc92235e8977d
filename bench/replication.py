"""What replication costs, and what a failover costs (issue 20's targets, docs/replication.md):

- publish throughput and publish->OK latency (p50, p99) of a replicated topic against the same
  publishers on an unreplicated nsqd (default flags, and --mem-queue-size=0: every message
  through the disk, as a replicated topic's are), with 2 and 3 members on this machine, and
  the CPU time each process spends per message (primary, replicas, publishers);
- with ``--failover N``: N kill -9 trials of tests/integration/test_replication_kill.py
  (default settings: 3 s failover timeout), reporting the time from the kill to the first
  delivery by another member and the messages delivered twice per failover.

    .venv/bin/python bench/replication.py                    # publish figures, 10 s per mode
    .venv/bin/python bench/replication.py --runfor 20 --conns 16
    .venv/bin/python bench/replication.py --failover 10 --no-publish

Each publisher connection sends PUB (100-byte bodies; MPUB of `--batch` with a batch) and waits
for its OK before the next, as Go's bench_writer does; `--conns` of them run concurrently in
this process (Trio). The latencies are per command (publish -> OK).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trionsq.protocol import MAGIC_V2, mpub, pub  # noqa: E402
from trionsq.testing import DaemonProcess, free_ports, pythonpath_env  # noqa: E402

TOPIC = "bench"
_HEAD = struct.Struct(">Ii")


async def _publisher(
    address: tuple[str, int], until: float, latencies: list[float], body: bytes, batch: int = 1
) -> None:
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(MAGIC_V2)
        command = pub(TOPIC, body) if batch == 1 else mpub(TOPIC, [body] * batch)
        buffer = bytearray()
        while trio.current_time() < until:
            start = time.perf_counter()
            await stream.send_all(command)
            while True:
                if len(buffer) >= 8:
                    size, kind = _HEAD.unpack_from(buffer, 0)
                    if len(buffer) >= 4 + size:
                        data = bytes(buffer[8 : 4 + size])
                        del buffer[: 4 + size]
                        if kind == 0 and data == b"_heartbeat_":
                            await stream.send_all(b"NOP\n")
                            continue
                        break
                chunk = await stream.receive_some(65536)
                if not chunk:
                    raise RuntimeError("connection closed")
                buffer += chunk
            if kind != 0 or data != b"OK":
                raise RuntimeError(f"publish failed: {data!r}")
            latencies.append(time.perf_counter() - start)


async def _publish(
    address: tuple[str, int], conns: int, runfor: float, batch: int, pids: list[int]
) -> dict[str, float]:
    """Publish for `runfor` seconds; the rate, the latencies, and the CPU time each of `pids`
    (the primary, then the other members) and this process spent per message meanwhile
    (which varies far less with the machine's load than the rates do)."""
    latencies: list[float] = []
    body = b"x" * 100
    # Warm up (the first PUB creates the topic and, replicated, elects its primary).
    await _publisher(address, trio.current_time() + 1.0, [], body)
    pids = [*pids, os.getpid()]
    before = [_cpu_seconds(pid) for pid in pids]
    until = trio.current_time() + runfor
    async with trio.open_nursery() as nursery:
        for _ in range(conns):
            nursery.start_soon(_publisher, address, until, latencies, body, batch)
    spent = [_cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
    latencies.sort()
    n = len(latencies)
    messages = n * batch
    return {
        "msgs_per_s": messages / runfor,
        "p50_us": latencies[n // 2] * 1e6,
        "p99_us": latencies[min(n - 1, int(n * 0.99))] * 1e6,
        "cpu_us_primary": spent[0] / messages * 1e6,
        "cpu_us_replicas": sum(spent[1:-1]) / messages * 1e6,
        "cpu_us_client": spent[-1] / messages * 1e6,
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cluster(size: int, root: Path, extra: list[str]) -> list[DaemonProcess]:
    ports = free_ports(size)
    daemons = []
    for i in range(size):
        data = root / f"n{i}"
        data.mkdir()
        peers = [f"--replicate-to=127.0.0.1:{p}" for j, p in enumerate(ports) if j != i]
        args = [
            f"--node-id={i + 1}",
            f"--tcp-address=127.0.0.1:{ports[i]}",
            f"--replicate-topic={TOPIC}",
            "--replication-secret=bench",
            *peers,
            *extra,
        ]
        daemons.append(DaemonProcess("nsqd", args=args, data_path=str(data), env=pythonpath_env()))
    return daemons


def _wait_connected(daemons: list[DaemonProcess]) -> None:
    for daemon in daemons:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if (
                sum(
                    "REPLICATION(" in line and "connected to node" in line
                    for line in daemon.stderr_lines
                )
                >= len(daemons) - 1
            ):
                break
            time.sleep(0.05)


def publish_figures(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    modes: list[tuple[str, int, list[str]]] = [
        ("unreplicated", 1, []),
        ("unreplicated --mem-queue-size=0", 1, ["--mem-queue-size=0"]),
        ("replicated, 2 members", 2, []),
        ("replicated, 3 members", 3, []),
    ]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in modes}
    # Rounds interleave the modes, so that a machine whose load changes affects them alike.
    for _ in range(args.rounds):
        for name, size, flags in modes:
            with tempfile.TemporaryDirectory(prefix="trionsq-bench-repl-") as tmp:
                if size == 1:
                    daemons = [DaemonProcess("nsqd", args=[*flags, *args.nsqd_arg], data_path=tmp)]
                else:
                    daemons = _cluster(size, Path(tmp), args.nsqd_arg)
                    _wait_connected(daemons)
                try:
                    run = trio.run(
                        _publish,
                        daemons[0].tcp_address,
                        args.conns,
                        args.runfor,
                        args.batch,
                        [d.proc.pid for d in daemons],
                    )
                finally:
                    for daemon in daemons:
                        daemon.close()
            runs[name].append(run)
            print(name, json.dumps({k: round(v, 1) for k, v in run.items()}), flush=True)
    for name, results_of in runs.items():
        results[name] = {
            key: statistics.median(r[key] for r in results_of) for key in results_of[0]
        }
    return results


def failover_figures(trials: int) -> list[dict[str, float]]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "tests/integration/test_replication_kill.py",
            "--replication-trials",
            str(trials),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    figures = [
        json.loads(m.group(1)) for m in re.finditer(r"REPLICATION-TRIAL (\{.*\})", out.stdout)
    ]
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
    print("trials:", summary)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runfor", type=float, default=10.0)
    parser.add_argument("--conns", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1, help="messages per command (MPUB)")
    parser.add_argument(
        "--nsqd-arg", action="append", default=[], help="flag for every nsqd (repeatable)"
    )
    parser.add_argument("--failover", type=int, default=0, help="kill -9 trials to run")
    parser.add_argument("--no-publish", action="store_true")
    args = parser.parse_args()
    if not args.no_publish:
        results = publish_figures(args)
        base = results["unreplicated"]
        for name, figures in results.items():
            print(
                f"{name:34s} {figures['msgs_per_s']:9,.0f} msgs/s "
                f"({figures['msgs_per_s'] / base['msgs_per_s']:.2f}x)  "
                f"ack p50 {figures['p50_us']:8,.0f} µs  p99 {figures['p99_us']:8,.0f} µs  "
                f"CPU µs/msg: primary {figures['cpu_us_primary']:.1f}, "
                f"replicas {figures['cpu_us_replicas']:.1f}, "
                f"publishers {figures['cpu_us_client']:.1f}"
            )
    if args.failover:
        figures = failover_figures(args.failover)
        if figures:
            times = [
                f["first_delivery_after_kill_s"]
                for f in figures
                if f["first_delivery_after_kill_s"]
            ]
            redelivered = [f["redelivered"] for f in figures]
            print(
                f"failover, kill -9 -> first delivery by the new primary: median "
                f"{statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} trials"
            )
            print(
                f"messages delivered twice per failover (our consumer, channel c): median "
                f"{statistics.median(redelivered):.0f}, max {max(redelivered)}; "
                f"pynsq: median {statistics.median(f['pynsq_redelivered'] for f in figures):.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
