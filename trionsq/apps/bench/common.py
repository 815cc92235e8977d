"""Shared pieces of the benchmark clients: flag parsing helpers, percentile maths, blocking
socket helpers, process orchestration and the figures' formatting.

The clients use plain blocking sockets, one per process, so that the Python client costs as
little as possible per message; nothing here imports trio.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import re
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trionsq.goerrors import dial_error
from trionsq.protocol import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, MAGIC_V2

MB = 1024 * 1024
RECV_SIZE = 65536

_FRAME_HEADER = struct.Struct(">Ii")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class BenchError(RuntimeError):
    """A benchmark could not run (connection refused, error frame, worker died, ...)."""


def parse_duration(text: str) -> float:
    """Seconds from a Go-style duration (``10s``, ``500ms``, ``1m30s``) or a bare number of
    seconds (``2.5``)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if value < 0 or math.isnan(value) or math.isinf(value):
            raise ValueError(f"invalid duration {text!r}")
        return value
    pos = 0
    total = 0.0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return total


def parse_address(text: str, default_port: int = 4150) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a (host, port) tuple."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile `p` (0 < p <= 100) of already sorted values."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} out of range (0, 100]")
    rank = math.ceil(p / 100.0 * n - 1e-9)
    return sorted_values[min(max(rank, 1), n) - 1]


@dataclass
class ThroughputResult:
    """A writer's or reader's measurement."""

    label: str
    msgs: int
    elapsed: float
    size: int
    #: CPU seconds the client processes used while measuring (user + system).
    client_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.msgs / self.elapsed if self.elapsed > 0 else 0.0

    def line(self, label: str | None = None) -> str:
        return format_throughput(label or self.label, self.elapsed, self.msgs, self.size)


def format_throughput(label: str, elapsed: float, msgs: int, size: int) -> str:
    """``writer: 10.0s, 3,000,000 msgs, 300,000 msgs/s, 28.61 MB/s``."""
    rate = msgs / elapsed if elapsed > 0 else 0.0
    mbs = rate * size / MB
    return f"{label}: {elapsed:.1f}s, {msgs:,} msgs, {rate:,.0f} msgs/s, {mbs:.2f} MB/s"


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid`, from ``/proc/<pid>/status`` (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise BenchError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process `pid` (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- blocking socket helpers -------------------------------------------------------------


def connect(address: tuple[str, int], timeout: float = 10.0) -> socket.socket:
    """A TCP connection to nsqd with the V2 magic sent; TCP_NODELAY on, like Go's clients.
    `BenchError` (Go's ``dial tcp ...`` text) when it cannot connect."""
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except OSError as exc:
        raise BenchError(dial_error(address[0], address[1], exc)) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(MAGIC_V2)
    return sock


class Receiver(Protocol):
    """A socket, or a connection upgraded to TLS or compression (`transports.Conn`)."""

    def recv(self, size: int, /) -> bytes: ...

    def sendall(self, data: bytes, /) -> Any: ...


def read_frame(sock: Receiver, pending: bytearray) -> tuple[int, bytes]:
    """Read one whole frame (blocking; for handshakes, not hot loops). `pending` keeps the
    bytes read past it."""
    while True:
        if len(pending) >= 8:
            size, frame_type = _FRAME_HEADER.unpack_from(pending)
            if len(pending) >= size + 4:
                data = bytes(pending[8 : size + 4])
                del pending[: size + 4]
                return frame_type, data
        chunk = sock.recv(RECV_SIZE)
        if not chunk:
            raise BenchError("nsqd closed the connection")
        pending += chunk


def expect_ok(sock: Receiver, what: str, pending: bytearray) -> None:
    """Read the response to a command; raise `BenchError` on anything but ``OK``."""
    while True:
        frame_type, data = read_frame(sock, pending)
        if frame_type == FRAME_TYPE_RESPONSE and data == b"_heartbeat_":
            sock.sendall(b"NOP\n")
            continue
        if frame_type == FRAME_TYPE_RESPONSE and data == b"OK":
            return
        kind = "error" if frame_type == FRAME_TYPE_ERROR else f"frame type {frame_type}"
        raise BenchError(f"{what}: {kind} {data!r}")


def subscribe(address: tuple[str, int], topic: str, channel: str) -> tuple[socket.socket, bytes]:
    """Connect and SUB; returns the socket and the bytes already read past the OK."""
    sock = connect(address)
    sock.sendall(b"SUB %s %s\n" % (topic.encode(), channel.encode()))
    pending = bytearray()
    expect_ok(sock, "SUB", pending)
    return sock, bytes(pending)


# --- processes -----------------------------------------------------------------------------

#: Worker processes are spawned (not forked): the parent may hold threads (the daemon's stderr
#: reader) and the workers need nothing from it but their arguments.
_CTX = multiprocessing.get_context("spawn")


def _worker_main(
    target: Callable[..., Any], index: int, args: tuple[Any, ...], ready: Any, go: Any, out: Any
) -> None:
    try:
        result = target(index, args, ready, go)
    except BenchError as exc:  # reported to the parent, which raises it
        out.put((index, "error", str(exc)))
    except BaseException as exc:
        out.put((index, "error", f"{type(exc).__name__}: {exc}"))
    else:
        out.put((index, "ok", result))


def run_workers(
    target: Callable[..., Any],
    nprocs: int,
    args: tuple[Any, ...],
    timeout: float,
    extra: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]] = (),
) -> tuple[list[Any], float]:
    """Run `target(index, args, ready, go)` in `nprocs` processes (and each `(target, args)`
    of `extra` in one more). Each worker connects, calls ``ready.release()``, then waits for
    ``go``; the parent sets `go` once all are ready. Returns the results in index order and
    the parent's `time.perf_counter()` at go. Every process is gone when this returns."""
    jobs = [(target, args)] * nprocs + list(extra)
    ready = _CTX.Semaphore(0)
    go = _CTX.Event()
    out = _CTX.Queue()
    procs = [
        _CTX.Process(target=_worker_main, args=(t, i, a, ready, go, out), daemon=True)
        for i, (t, a) in enumerate(jobs)
    ]
    results: list[Any] = [None] * len(jobs)
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 30.0
        for _ in procs:
            while not ready.acquire(timeout=0.2):
                _check_early_exit(procs, out)
                if time.monotonic() > deadline:
                    raise BenchError("workers did not connect within 30 s")
        started = time.perf_counter()
        go.set()
        deadline = time.monotonic() + timeout
        pending = len(procs)
        while pending:
            try:
                index, status, value = out.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise BenchError(f"workers did not finish within {timeout:.0f} s") from None
                if all(not p.is_alive() for p in procs) and out.empty():
                    raise BenchError("a worker died without a result") from None
                continue
            if status == "error":
                raise BenchError(f"worker {index}: {value}")
            results[index] = value
            pending -= 1
        return results, started
    finally:
        for p in procs:
            p.join(2.0)
            if p.is_alive():
                p.terminate()
                p.join(2.0)
        out.close()


def _check_early_exit(procs: Sequence[Any], out: Any) -> None:
    try:
        index, status, value = out.get_nowait()
    except queue.Empty:
        return
    if status == "error":
        raise BenchError(f"worker {index}: {value}")
    raise BenchError(f"worker {index} finished before it was started")
