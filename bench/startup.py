#!/usr/bin/env python3
"""How long an nsqd takes from exec until its HTTP port accepts connections, and until its
first ``200 OK`` to ``GET /ping``: what a test harness that starts nsqd and sleeps a fixed time
(go-nsq's test.sh: 0.3 s) races. A connection the kernel accepted is served once nsqd is up.

    bench/startup.py [--rounds N] [--go PATH_TO_GO_NSQD] [-- EXTRA NSQD FLAGS]

Each round starts the daemon on a fresh data path with kernel-chosen ports, except the HTTP
port, which is picked free beforehand (the client must know where to poll), tries to connect
every millisecond, sends /ping on the first connection accepted and waits for the answer
(again on a new connection if it fails), and stops it (SIGTERM, then SIGKILL). With ``--go``,
Go's nsqd is run in alternate rounds, so that both see the same machine. Prints min, median
and max in ms per daemon and figure, and with Go their ratios of medians.
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


def _connect(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=0.5)
    except OSError:
        return None


def _ping(sock: socket.socket) -> bool:
    """GET /ping on `sock`, waiting for the answer (a connection the kernel queued is answered
    once the daemon serves)."""
    sock.settimeout(20.0)
    try:
        sock.sendall(_PING)
        return sock.recv(64)[8:13] == b" 200 "  # Go answers HTTP/1.0 as HTTP/1.0
    except OSError:
        return False


def time_to_ping(argv: list[str], timeout: float = 20.0) -> tuple[float, float]:
    """Seconds from exec of `argv` + its address flags until its HTTP port accepts a
    connection, and until /ping's first 200 on such a connection."""
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
        accepted = None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode}")
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{argv[0]} did not answer /ping in {timeout} s")
            sock = _connect(port)
            if sock is None:
                time.sleep(0.001)
                continue
            if accepted is None:
                accepted = time.perf_counter() - started
            with sock:
                if _ping(sock):
                    return accepted, time.perf_counter() - started
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
        f"{name:<18} min {ms[0]:7.1f} ms  median {statistics.median(ms):7.1f} ms  "
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
    accepting: dict[str, list[float]] = {name: [] for name in commands}
    pinged: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():  # a warm-up of each, not counted
        time_to_ping(argv)
    for _ in range(args.rounds):
        for name, argv in commands.items():
            accepted, answered = time_to_ping(argv)
            accepting[name].append(accepted)
            pinged[name].append(answered)
    for name in commands:
        print(_summary(f"{name}: accepts", accepting[name]))
        print(_summary(f"{name}: /ping", pinged[name]))
    if args.go:
        for figure, times in (("accepts", accepting), ("/ping", pinged)):
            ratio = statistics.median(times["trionsq"]) / statistics.median(times["go nsqd"])
            print(f"{figure}: trionsq / go nsqd (medians) {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
