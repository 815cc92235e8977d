#!/usr/bin/env python3
"""HTTP publishing rate: ``POST /pub`` requests per second an nsqd answers, trionsq's and (with
``--go``) Go's in alternate rounds.

    bench/http_pub.py [--conns 4] [--seconds 8] [--rounds 3] [--go PATH_TO_GO_NSQD]

Each round starts the daemon (``--mem-queue-size=10000000``: every message in memory, so the
figure is the HTTP path's), then ``--conns`` threads each keep one keep-alive connection with
one 100-byte ``/pub`` in flight (reconnecting when the server closes it: hypercorn does after
1000 requests) for ``--seconds``. The client is Python: what it can send caps the figure of a
fast server (Go's), so compare within one run and read Go's as a lower bound.
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
import threading
import time

_BODY = b"x" * 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _load(port: int, conns: int, seconds: float) -> float:
    request = (
        f"POST /pub?topic=http_bench HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Length: {len(_BODY)}\r\n\r\n".encode()
        + _BODY
    )
    counts = [0] * conns
    start = threading.Barrier(conns + 1)
    stop_at = [0.0]

    def worker(i: int) -> None:
        sock = _connect(port)
        start.wait()
        while time.monotonic() < stop_at[0]:
            sock.sendall(request)
            answer = b""
            while not answer.endswith(b"\r\n\r\nOK"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
            if answer.endswith(b"\r\n\r\nOK"):
                counts[i] += 1
            else:  # the server closed the connection: open another
                sock.close()
                sock = _connect(port)
        sock.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(conns)]
    stop_at[0] = time.monotonic() + 3600
    for thread in threads:
        thread.start()
    started = time.monotonic()
    stop_at[0] = started + seconds
    start.wait()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started)


def measure(argv: list[str], conns: int, seconds: float) -> float:
    data_path = tempfile.mkdtemp(prefix="http-pub-bench-")
    port = _free_port()
    proc = subprocess.Popen(
        [
            *argv,
            "--tcp-address=127.0.0.1:0",
            f"--http-address=127.0.0.1:{port}",
            f"--data-path={data_path}",
            "--mem-queue-size=10000000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with _connect(port) as sock:
                    sock.sendall(b"GET /ping HTTP/1.0\r\n\r\n")
                    if sock.recv(64)[8:13] == b" 200 ":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} did not start")
            time.sleep(0.01)
        return _load(port, conns, seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_path, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conns", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--go", help="Go's nsqd binary, run in alternate rounds")
    parser.add_argument(
        "--trionsq",
        default=os.path.join(os.path.dirname(sys.executable), "trionsq"),
        help="the trionsq command (default: beside this Python)",
    )
    args = parser.parse_args()
    commands = {"trionsq": [args.trionsq, "nsqd"]}
    if args.go:
        commands["go nsqd"] = [args.go]
    rates: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, argv in commands.items():
            rates[name].append(measure(argv, args.conns, args.seconds))
    for name, measured in rates.items():
        shown = ", ".join(f"{rate:.0f}" for rate in measured)
        print(f"{name:<8} POST /pub: median {statistics.median(measured):.0f} req/s ({shown})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
