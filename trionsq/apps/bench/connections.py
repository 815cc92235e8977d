"""What an idle V2 connection costs nsqd in resident memory.

Reads the daemon's VmRSS, opens `conns` TCP connections that each send the V2 magic and then
nothing, waits until the daemon has accepted every one of them and read every magic (each
daemon-side socket established, its receive queue empty, in ``/proc/net/tcp``), lets it settle,
and reads VmRSS again: the delta over `conns` is the cost of one connection. The bench
process needs a descriptor per connection: `raise_nofile` lifts its soft limit.
"""

from __future__ import annotations

import resource
import socket
import time
from dataclasses import dataclass

from trionsq.goerrors import dial_error
from trionsq.protocol import MAGIC_V2

from .common import BenchError, rss_bytes

#: TCP_ESTABLISHED in /proc/net/tcp.
_ESTABLISHED = "01"


@dataclass
class ConnectionsResult:
    conns: int
    rss_before: int
    rss_after: int

    @property
    def per_conn(self) -> float:
        return (self.rss_after - self.rss_before) / self.conns if self.conns else 0.0

    def line(self) -> str:
        mib = 2**20
        return (
            f"connections: {self.conns:,} idle V2 connections: RSS {self.rss_before / mib:,.1f}"
            f" MiB -> {self.rss_after / mib:,.1f} MiB, {self.per_conn:,.0f} B/conn"
        )


def raise_nofile(needed: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (children inherit it);
    raises `BenchError` if that is below `needed`. Returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise BenchError(f"RLIMIT_NOFILE hard limit {hard} < {needed} descriptors needed")
    target = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def nofile_limit(pid: int) -> int | None:
    """Process `pid`'s soft limit on open files (``/proc/<pid>/limits``), None if unknown."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    value = line.split()[3]
                    return None if value == "unlimited" else int(value)
    except OSError:
        return None
    return None


def daemon_sockets(port: int) -> tuple[int, int]:
    """(established connections, those with unread bytes) on the daemon side of local
    `port`, from ``/proc/net/tcp`` and ``/proc/net/tcp6``."""
    established = unread = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    local, state, queues = fields[1], fields[3], fields[4]
                    if state != _ESTABLISHED or int(local.rsplit(":", 1)[1], 16) != port:
                        continue
                    established += 1
                    unread += int(queues.split(":")[1], 16) > 0
        except OSError:
            continue
    return established, unread


def open_idle(address: tuple[str, int], conns: int) -> list[socket.socket]:
    """`conns` connections that have each sent the V2 magic."""
    socks: list[socket.socket] = []
    try:
        for _ in range(conns):
            sock = socket.create_connection(address, timeout=30.0)
            socks.append(sock)
            sock.sendall(MAGIC_V2)
    except OSError as exc:
        close_all(socks)
        reason = dial_error(address[0], address[1], exc)
        raise BenchError(f"connection {len(socks) + 1}: {reason}") from None
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _wait_read(port: int, conns: int, timeout: float) -> None:
    """Wait until the daemon has accepted every connection and read every magic: `conns`
    established daemon-side sockets, none with unread bytes (a connection still in the
    accept queue has its magic unread)."""
    deadline = time.monotonic() + timeout
    while True:
        established, unread = daemon_sockets(port)
        if established >= conns and unread == 0:
            return
        if time.monotonic() > deadline:
            raise BenchError(
                f"after {timeout:.0f}s the daemon side has {established:,} established"
                f" connections of {conns:,}, {unread:,} with unread bytes"
            )
        time.sleep(0.2)


def run(
    address: tuple[str, int],
    pid: int,
    *,
    conns: int = 10_000,
    settle: float = 2.0,
    timeout: float = 120.0,
) -> ConnectionsResult:
    """Open `conns` idle V2 connections and measure nsqd's RSS growth; closes them."""
    raise_nofile(conns + 256)
    limit = nofile_limit(pid)
    if limit is not None and limit < conns + 64:
        raise BenchError(f"nsqd pid {pid} may open only {limit} files (< {conns} connections)")
    before = rss_bytes(pid)
    socks = open_idle(address, conns)
    try:
        _wait_read(address[1], conns, timeout)
        time.sleep(settle)
        after = rss_bytes(pid)
    finally:
        close_all(socks)
    return ConnectionsResult(conns, before, after)
