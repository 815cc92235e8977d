"""The single-message round trip of trionsq's nsqd against Go's (issue 33), per message: the
rate, the round trip's percentiles, the daemon's CPU time, its context switches and its system
calls by name.

Two workloads, each from one blocking client (Python, the same for both daemons):

- ``pub``: single PUBs on one connection, each OK awaited before the next (a ping-pong);
- ``cycle``: one message at a time, published (OK awaited), delivered to a consumer (which
  IDENTIFYs with no output buffer, so that neither daemon holds the delivery back) and FINned
  before the next is published: what the daemon spends on a message published and FINned.

Rounds alternate the servers (trionsq, go, trionsq, ...), each round on a fresh daemon with
``--mem-queue-size=10000000`` (nothing goes to disk). The rate is given both from the mean
(count / time) and from the median round trip: on a shared virtual machine a few long stalls
move the first and hardly the second. CPU (user + system, every thread) comes from
``/proc/PID/stat``, context switches from ``/proc/PID/task/*/status``. With ``--syscalls``
each round makes a second pass of the same length under ``perf stat`` (syscall tracepoints,
on the daemon's pid) and reports the calls per message by name; the timed pass runs without
it. ``--background N`` runs N CPU-bound processes beside each round, as ``bench/compare``.

    .venv/bin/python bench/round_trip.py --go-nsqd /path/to/nsqd --rounds 5 --syscalls
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trionsq.apps.bench.common import (  # noqa: E402
    BenchError,
    connect,
    cpu_seconds,
    expect_ok,
    read_frame,
)
from trionsq.apps.bench.compare import (  # noqa: E402
    Background,
    Daemon,
    Server,
    add_server_arguments,
    servers_from,
)
from trionsq.protocol import FRAME_TYPE_MESSAGE, identify  # noqa: E402

TOPIC = b"round_trip"
BODY = b"x" * 100
PUB = b"PUB " + TOPIC + b"\n" + struct.pack(">I", len(BODY)) + BODY
WARM_UP = 2000
#: The system calls reported by name (any other is counted in the total only).
SYSCALLS = (
    "read",
    "write",
    "recvfrom",
    "sendto",
    "epoll_wait",
    "epoll_pwait",
    "epoll_ctl",
    "futex",
    "nanosleep",
    "sched_yield",
    "getpid",
)


def pub_workload(address: tuple[str, int]) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one PUB and its OK, close)."""
    publisher = connect(address)
    pending = bytearray()
    send = publisher.sendall

    def one() -> None:
        send(PUB)
        expect_ok(publisher, "PUB", pending)

    return one, publisher.close


def cycle_workload(address: tuple[str, int]) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one message published, delivered and FINned, close)."""
    publisher, consumer = connect(address), connect(address)
    published, received = bytearray(), bytearray()
    consumer.sendall(identify({"output_buffer_size": -1, "client_id": "round_trip"}))
    expect_ok(consumer, "IDENTIFY", received)
    consumer.sendall(b"SUB " + TOPIC + b" c\n")
    expect_ok(consumer, "SUB", received)
    consumer.sendall(b"RDY 1\n")
    send, finish = publisher.sendall, consumer.sendall

    def one() -> None:
        send(PUB)
        expect_ok(publisher, "PUB", published)
        frame_type, data = read_frame(consumer, received)
        while frame_type != FRAME_TYPE_MESSAGE:
            if data != b"_heartbeat_":
                raise BenchError(f"consumer: expected a message, got {data[:100]!r}")
            finish(b"NOP\n")
            frame_type, data = read_frame(consumer, received)
        finish(b"FIN " + data[10:26] + b"\n")  # after the timestamp and the attempts

    def close() -> None:
        publisher.close()
        consumer.close()

    return one, close


WORKLOADS = {"pub": pub_workload, "cycle": cycle_workload}


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of `pid` so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # a thread that ended
        for line in text.splitlines():
            if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                total += int(line.split()[1])
    return total


def timed_pass(one: Callable[[], None], pid: int, count: int) -> dict[str, float]:
    """`count` round trips: rates, round-trip percentiles, CPU and context switches."""
    clock = time.perf_counter_ns
    trips = [0] * count
    cpu0, switches0 = cpu_seconds(pid), context_switches(pid)
    start = clock()
    for i in range(count):
        t = clock()
        one()
        trips[i] = clock() - t
    elapsed = (clock() - start) / 1e9
    time.sleep(0.05)  # let the daemon finish the last FIN before its CPU is read
    cpu, switches = cpu_seconds(pid) - cpu0, context_switches(pid) - switches0
    trips.sort()
    return {
        "rate": count / elapsed,
        "rate_median": 1e9 / trips[count // 2],
        "p50_us": trips[count // 2] / 1000,
        "p99_us": trips[min(count - 1, count * 99 // 100)] / 1000,
        "cpu_us": cpu / count * 1e6,
        "switches": switches / count,
    }


def syscall_pass(one: Callable[[], None], pid: int, count: int) -> dict[str, float]:
    """`count` more round trips under `perf stat`: system calls per message, by name."""
    events = ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{name}" for name in SYSCALLS]
    perf = subprocess.Popen(
        ["perf", "stat", "-x", ",", "-e", ",".join(events), "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)  # perf attaches
    for _ in range(count):
        one()
    time.sleep(0.05)
    perf.send_signal(signal.SIGINT)
    _, report = perf.communicate(timeout=30)
    counts: dict[str, float] = {}
    for line in report.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].isdigit():
            name = fields[2].removeprefix("syscalls:sys_enter_")
            name = "total" if name == "raw_syscalls:sys_enter" else name
            counts[f"sys_{name}"] = int(fields[0]) / count
    if "sys_total" not in counts:
        raise RuntimeError(f"perf stat gave no counts:\n{report[-500:]}")
    return counts


def one_round(
    server: Server, workload: str, count: int, syscalls: bool, flags: list[str]
) -> dict[str, float]:
    with Daemon(server, ["--mem-queue-size=10000000", *flags]) as daemon:
        one, close = WORKLOADS[workload](daemon.tcp)
        try:
            for _ in range(WARM_UP):
                one()
            figures = timed_pass(one, daemon.pid, count)
            if syscalls:
                figures.update(syscall_pass(one, daemon.pid, count))
        finally:
            close()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/round_trip.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_arguments(parser)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per server (3)")
    parser.add_argument("--count", type=int, default=20000, help="messages per pass (20000)")
    parser.add_argument(
        "--workload", choices=(*WORKLOADS, "both"), default="both", help="pub, cycle or both"
    )
    parser.add_argument("--syscalls", action="store_true", help="count system calls (perf)")
    parser.add_argument("--background", type=int, default=0, metavar="N", help="busy processes")
    parser.add_argument(
        "--nsqd-arg", action="append", default=[], metavar="FLAG", help="flag for both daemons"
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.count < 1 or args.background < 0:
        parser.error("--rounds and --count must be 1 or more, --background 0 or more")
    if args.syscalls and shutil.which("perf") is None:
        parser.error("--syscalls needs perf (apt-get install linux-perf)")
    servers = servers_from(args)
    workloads = list(WORKLOADS) if args.workload == "both" else [args.workload]
    load_before = os.getloadavg()
    results: dict[str, dict[str, list[dict[str, float]]]] = {w: {} for w in workloads}
    for workload in workloads:
        for r in range(args.rounds):
            order = servers if r % 2 == 0 else servers[::-1]
            for server in order:
                with Background(args.background):
                    figures = one_round(server, workload, args.count, args.syscalls, args.nsqd_arg)
                results[workload].setdefault(server.name, []).append(figures)
                print(
                    f"[{workload}] round {r + 1}: {server.name} {figures['rate']:,.0f}/s "
                    f"(median trip {figures['p50_us']:.0f} µs), CPU {figures['cpu_us']:.1f} µs/msg",
                    file=sys.stderr,
                    flush=True,
                )
    load_after = os.getloadavg()
    print(
        f"{args.rounds} round(s) of {args.count:,} messages per server, background "
        f"{args.background}; load before {load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    medians = {
        w: {s: _medians(rounds) for s, rounds in per_server.items()}
        for w, per_server in results.items()
    }
    print(format_table(medians, [s.name for s in servers]))
    if args.json:
        print(json.dumps({"rounds": results, "medians": medians}))
    return 0


def _medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    keys = dict.fromkeys(k for figures in rounds for k in figures)
    return {k: statistics.median(f[k] for f in rounds if k in f) for k in keys}


_ROWS = (
    ("rate", "msg/s (count / time)", 0),
    ("rate_median", "msg/s (1 / median trip)", 0),
    ("p50_us", "round trip p50 (µs)", 0),
    ("p99_us", "round trip p99 (µs)", 0),
    ("cpu_us", "daemon CPU per message (µs)", 1),
    ("switches", "daemon context switches per message", 2),
)


def format_table(medians: dict[str, dict[str, dict[str, float]]], servers: list[str]) -> str:
    """Medians per workload and figure, a column per server, and trionsq/go when both ran."""
    both = len(servers) == 2
    header = ["figure", *servers] + (["trionsq/go"] if both else [])
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for workload, per_server in medians.items():
        keys = [k for k, _, _ in _ROWS] + sorted(
            {k for f in per_server.values() for k in f if k.startswith("sys_")}
        )
        labels = {k: (label, digits) for k, label, digits in _ROWS}
        for key in keys:
            label, digits = labels.get(key, (f"syscalls per message: {key[4:]}", 2))
            values = [per_server.get(s, {}).get(key) for s in servers]
            if key.startswith("sys_") and not any(values):
                continue  # a call neither daemon made
            cells = [f"{workload}: {label}"]
            cells += ["" if v is None else f"{v:,.{digits}f}" for v in values]
            if both:
                a, b = values
                cells.append(f"{a / b:.2f}" if a is not None and b else "")
            lines.append(" | ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
