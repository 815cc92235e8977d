"""`DirectSocketStream`: a client's TCP connection, read and written without a scheduler
round trip when the socket is ready.

Why: `trio.SocketStream` yields to the scheduler on every successful `receive_some` and
`send_all` (so that every I/O call is a checkpoint). On nsqd's hot paths, an MPUB answered with
an OK or a batch of messages flushed to a consumer, that yield costs as much as the work: a
minimal Trio server answering one command per read did 25k round trips/s with
`trio.SocketStream` and 33k with direct calls (Go's bench_writer, two connections, this 2-core
machine). Here the socket is called first and Trio waits only when it would block
(`BlockingIOError`), through the `trio.SocketStream` beneath.

Fairness: a connection whose socket is always ready would never yield, and starve the other
tasks (the topic pumps, other connections). So every `FAIR_TURNS`-th receive goes through the
`trio.SocketStream`, which yields; a send never needs to, as the command loop's next receive
comes soon after. Cancellation is noticed at those yields and whenever a call would block.

Busy polling (--busy-poll): a request and its answer (a publisher waiting for each OK, a
consumer's FIN after each message) is a ping-pong, and each wait in Trio costs more than the
work: registering the socket with epoll, the loop going to sleep in `epoll_wait` and waking
(~30-40 µs on this kind of virtual machine), the task rescheduled. Go nsqd's goroutines pay
less: its scheduler spins a while looking for work before it parks a thread. So a connection
whose previous wait was shorter than `busy_poll` expects the next to be short too, and retries
its read at each pass of the loop (a checkpoint: every other task runs meanwhile) for up to
`busy_poll` before it waits through Trio. A connection that waited longer (an idle one, a
publisher at a modest rate) does not spin, so polling costs CPU time only while ping-pong
traffic is faster than `busy_poll` per round trip, where it buys throughput (single PUBs from
one connection: ~11k/s without, ~15k/s with 100 µs; see bench/README.md).

Errors are translated as Trio translates them: a closed socket is `trio.ClosedResourceError`,
any other `OSError` `trio.BrokenResourceError` (`trionsq.logs.go_net_error` words them as Go's
log lines do).
"""

from __future__ import annotations

import errno
import math
import os
from time import perf_counter

import trio

#: Receives in a row served without a yield, before one goes through Trio (which yields).
FAIR_TURNS = 4


class DirectSocketStream(trio.abc.HalfCloseableStream):
    """See the module docstring. `socket_stream` is the `trio.SocketStream` beneath (TLS is
    layered over this stream, not over it)."""

    __slots__ = ("_busy_poll", "_fd", "_last_wait", "_turns", "socket", "socket_stream")

    def __init__(self, socket_stream: trio.SocketStream, busy_poll: float = 0.0) -> None:
        self.socket_stream = socket_stream
        self.socket = socket_stream.socket
        self._fd = socket_stream.socket.fileno()
        self._turns = 0
        self._busy_poll = busy_poll
        # How long the last read that had to wait waited (inf: long, or never measured).
        self._last_wait = math.inf

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        turns = self._turns
        if turns < FAIR_TURNS:
            try:
                data = os.read(self._fd, max_bytes or 65536)
            except BlockingIOError:
                pass  # waited for below, outside this block: an idle connection would keep
                # the exception and its traceback alive while it waits (~0.5 KB)
            except OSError as err:
                raise _translated(err) from err
            else:
                self._turns = turns + 1
                return data
            if self._last_wait < self._busy_poll:
                return await self._receive_polling(max_bytes)
            return await self._wait_and_read(max_bytes)
        self._turns = 0
        return await self.socket_stream.receive_some(max_bytes)

    async def _receive_polling(self, max_bytes: int | None) -> bytes:
        """The socket has nothing to read and the last wait was short: poll it for a while,
        then wait through Trio (see the module docstring)."""
        start = perf_counter()
        end = start + self._busy_poll
        checkpoint = trio.lowlevel.checkpoint
        while True:
            await checkpoint()
            try:
                data = os.read(self._fd, max_bytes or 65536)
            except BlockingIOError:
                if perf_counter() >= end:
                    break
                continue
            except OSError as err:
                raise _translated(err) from err
            self._last_wait = 0.0
            self._turns = 1
            return data
        return await self._wait_and_read(max_bytes, start)

    async def _wait_and_read(self, max_bytes: int | None, since: float | None = None) -> bytes:
        """Wait until the socket is readable, then read, noting how long that took (for
        --busy-poll). Straight on Trio's epoll wait rather than through
        `trio.SocketStream.receive_some`: a connection spends its idle life here, and the
        frames and objects that path keeps while waiting are ~1.5 KB of the ~10 KB an idle
        connection cost."""
        self._turns = 0
        start = perf_counter() if since is None else since  # `since`: polling began then
        while True:
            if self._fd < 0:
                raise trio.ClosedResourceError("the stream is closed")
            await trio.lowlevel.wait_readable(self.socket)
            try:
                data = os.read(self._fd, max_bytes or 65536)
            except BlockingIOError:
                continue  # readable for another reader, or a spurious wake-up
            except OSError as err:
                raise _translated(err) from err
            self._last_wait = perf_counter() - start
            return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as err:
            raise _translated(err) from err
        if sent < len(data):
            with memoryview(data) as view:
                await self.socket_stream.send_all(view[sent:])

    async def wait_send_all_might_not_block(self) -> None:
        await self.socket_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.socket_stream.send_eof()

    @property
    def fileno(self) -> int:
        """The socket's file descriptor (-1 once closed)."""
        return self._fd

    async def aclose(self) -> None:
        self._fd = -1  # the number may be reused by the next socket opened: never touch it
        await self.socket_stream.aclose()


def _translated(err: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    if err.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was closed")
    return trio.BrokenResourceError(f"socket connection broken: {err}")
