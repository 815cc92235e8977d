"""What the conformance suite's blocking clients (`nsq_conn`, `lookupd_conn`) share: reading
a socket against a deadline, and `ConnectionClosed` for a server that closed it."""

from __future__ import annotations

import socket
import time


class ConnectionClosed(Exception):
    """The server closed the connection (EOF or reset)."""


def recv_before(sock: socket.socket, deadline: float, size: int) -> bytes:
    """Up to `size` bytes from `sock`, waiting until `deadline` (``time.monotonic()``):
    `TimeoutError` when it passes, `ConnectionClosed` on EOF, a reset or another socket error."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    sock.settimeout(remaining)
    try:
        data = sock.recv(size)
    except (ConnectionResetError, ConnectionAbortedError) as exc:
        raise ConnectionClosed("connection reset") from exc
    except OSError as exc:
        if isinstance(exc, TimeoutError):
            raise
        raise ConnectionClosed(str(exc)) from exc
    if not data:
        raise ConnectionClosed("EOF")
    return data
