"""`bench hostile`: what hostile connections cost nsqd in resident memory, and whether nsqd
gives it back once they close.

Two phases, each against the same nsqd: `conns` (300) connections that each send the V2 magic,
``PUB <topic>``, a body size of `declared` (1 MiB) and then only `partial` bytes of the body
(half by default), in pieces of `piece` bytes (64 KiB) sent round-robin over the
connections (many clients at once; a small piece is a dribble; 0 sends it at once); then
`idle_conns` (2000) connections that send only the magic. For each: VmRSS before (baseline),
once the daemon has read everything sent (peak), and `settle` seconds after the connections
closed (after); with `reset`, they close with a reset (SO_LINGER 0). Figures are printed,
never asserted.

"Read everything" is the kernel's view: every daemon-side socket of the listening port has an
empty receive queue (``/proc/net/tcp``); closed means none of them is left open.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from trionsq.goerrors import dial_error
from trionsq.protocol import MAGIC_V2

from .common import BenchError, rss_bytes

MIB = 1024 * 1024
#: TCP states in /proc/net/tcp: 0A is LISTEN; TIME_WAIT (06) and CLOSE (07) hold no process
#: memory.
_GONE_STATES = {"06", "07", "0A"}


@dataclass
class HostileResult:
    """One phase: RSS of nsqd before, with the connections open, and after they closed."""

    label: str
    conns: int
    sent_per_conn: int
    rss_baseline: int
    rss_peak: int
    rss_after: int
    settle: float
    #: True for the phase of idle connections (magic only).
    idle: bool = False

    @property
    def ratio(self) -> float:
        """RSS after close over the baseline (1.0: all given back)."""
        return self.rss_after / self.rss_baseline if self.rss_baseline else 0.0

    def line(self) -> str:
        mib = 2**20
        return (
            f"hostile ({self.label}): {self.conns:,} conns, {self.sent_per_conn:,} B sent each:"
            f" RSS {self.rss_baseline / mib:,.1f} MiB -> peak {self.rss_peak / mib:,.1f} MiB"
            f" -> {self.rss_after / mib:,.1f} MiB {self.settle:g} s after close"
            f" (after/baseline {self.ratio:.2f},"
            f" {(self.rss_peak - self.rss_baseline) / max(self.conns, 1) / 1024:,.1f} KiB/conn"
            " at peak)"
        )


def _daemon_sockets(port: int) -> list[tuple[str, int]]:
    """(state, rx_queue) of every socket whose local port is `port` but the listener."""
    found = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    local, state, queues = fields[1], fields[3], fields[4]
                    if int(local.rsplit(":", 1)[1], 16) != port or state in _GONE_STATES:
                        continue
                    found.append((state, int(queues.split(":")[1], 16)))
        except OSError:
            continue
    return found


def _wait_until(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def _open(address: tuple[str, int], n: int, first: bytes) -> list[socket.socket]:
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(address, timeout=10)
            s.sendall(first)
            socks.append(s)
    except OSError as err:
        for s in socks:
            s.close()
        reason = dial_error(address[0], address[1], err)
        raise BenchError(f"connection {len(socks) + 1} of {n}: {reason}") from err
    return socks


def _phase(
    label: str,
    address: tuple[str, int],
    pid: int,
    n: int,
    first: bytes,
    rest: bytes,
    piece: int,
    settle: float,
    idle: bool = False,
    reset: bool = False,
) -> HostileResult:
    port = address[1]
    baseline = rss_bytes(pid)
    socks = _open(address, n, first)
    peak = rss_bytes(pid)
    try:
        pos = 0
        while pos < len(rest):  # round-robin, so that each of the daemon's reads is small
            chunk = rest[pos : pos + piece]
            for s in socks:
                s.sendall(chunk)
            pos += piece
            peak = max(peak, rss_bytes(pid))
        expected = n

        def all_read() -> bool:
            socks_now = _daemon_sockets(port)
            return len(socks_now) >= expected and all(rx == 0 for _, rx in socks_now)

        if not _wait_until(all_read, 60.0):
            raise BenchError(f"{label}: nsqd did not read what was sent within 60 s")
        time.sleep(0.5)
        peak = max(peak, rss_bytes(pid))
    finally:
        for s in socks:
            if reset:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
    if not _wait_until(lambda: not _daemon_sockets(port), 60.0):
        raise BenchError(f"{label}: nsqd did not close the connections within 60 s")
    time.sleep(settle)
    after = rss_bytes(pid)
    return HostileResult(label, n, len(first) + len(rest), baseline, peak, after, settle, idle)


def run(
    address: tuple[str, int],
    pid: int,
    topic: str,
    *,
    conns: int = 300,
    declared: int = MIB,
    partial: int | None = None,
    piece: int = 65536,
    idle_conns: int = 2000,
    settle: float = 3.0,
    reset: bool = False,
) -> list[HostileResult]:
    """Both phases (a phase with no connections is skipped); the results in order."""
    results = []
    if partial is None:
        partial = declared // 2
    partial = min(partial, declared - 1)
    if conns:
        header = MAGIC_V2 + b"PUB %s\n" % topic.encode() + struct.pack(">i", declared)
        body = b"x" * partial
        first = header if piece else header + body
        rest = body if piece else b""
        how = f"in {piece:,} B pieces" if piece else "at once"
        label = f"partial PUB of {declared:,} B, {partial:,} B {how}"
        if reset:
            label += ", reset"
        results.append(
            _phase(label, address, pid, conns, first, rest, piece or 1, settle, reset=reset)
        )
    if idle_conns:
        label = "idle, magic only" + (", reset" if reset else "")
        results.append(
            _phase(label, address, pid, idle_conns, MAGIC_V2, b"", 1, settle, True, reset)
        )
    return results
