#!/usr/bin/env python3
"""How long an nsqd takes from exec to its first ``200 OK`` to ``GET /ping``: what a test
harness that starts nsqd and sleeps a fixed time (go-nsq's test.sh: 0.3 s) races.

    bench/startup.py [--rounds N] [--go PATH_TO_GO_NSQD] [-- EXTRA NSQD FLAGS]

Each round starts the daemon on a fresh data path with kernel-chosen ports, except the HTTP
port, which is picked free beforehand (the client must know where to poll), polls /ping every
millisecond over a new connection, and stops it (SIGTERM, then SIGKILL). With ``--go``, Go's
nsqd is run in alternate rounds, so that both see the same machine. Prints min, median and
max in ms per daemon, and with Go their ratio of medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

_PING = b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pinged(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(_PING)
            return s.recv(64)[8:13] == b" 200 "  # Go answers HTTP/1.0 as HTTP/1.0
    except OSError:
        return False


def time_to_ping(argv: list[str], timeout: float = 20.0) -> float:
    """Seconds from exec of `argv` + its address flags to /ping's first 200."""
    data_path = tempfile.mkdtemp(prefix="startup-bench-")
    port = _free_port()
    flags = [
        "--tcp-address=127.0.0.1:0",
        f"--http-address=127.0.0.1:{port}",
        f"--data-path={data_path}",
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv + flags, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True
    )
    try:
        while not _pinged(port):
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode}")
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{argv[0]} did not answer /ping in {timeout} s")
            time.sleep(0.001)
        return time.perf_counter() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_path, ignore_errors=True)


def _summary(name: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    return (
        f"{name:<10} min {ms[0]:7.1f} ms  median {statistics.median(ms):7.1f} ms  "
        f"max {ms[-1]:7.1f} ms  ({len(ms)} runs)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--go", help="Go's nsqd binary, run in alternate rounds")
    parser.add_argument(
        "--trionsq",
        default=os.path.join(os.path.dirname(sys.executable), "trionsq"),
        help="the trionsq command (default: beside this Python)",
    )
    parser.add_argument("flags", nargs="*", help="extra nsqd flags (after --)")
    args = parser.parse_args()
    commands = {"trionsq": [args.trionsq, "nsqd", *args.flags]}
    if args.go:
        commands["go nsqd"] = [args.go, *args.flags]
    times: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():  # a warm-up of each, not counted
        time_to_ping(argv)
    for _ in range(args.rounds):
        for name, argv in commands.items():
            times[name].append(time_to_ping(argv))
    for name, measured in times.items():
        print(_summary(name, measured))
    if args.go:
        ratio = statistics.median(times["trionsq"]) / statistics.median(times["go nsqd"])
        print(f"trionsq / go nsqd (medians): {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
