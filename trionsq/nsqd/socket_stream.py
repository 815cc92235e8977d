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

Errors are translated as Trio translates them: a closed socket is `trio.ClosedResourceError`,
any other `OSError` `trio.BrokenResourceError`.
"""

from __future__ import annotations

import errno
import os

import trio

#: Receives in a row served without a yield, before one goes through Trio (which yields).
FAIR_TURNS = 4


class DirectSocketStream(trio.abc.HalfCloseableStream):
    """See the module docstring. `socket_stream` is the `trio.SocketStream` beneath (TLS is
    layered over this stream, not over it)."""

    def __init__(self, socket_stream: trio.SocketStream) -> None:
        self.socket_stream = socket_stream
        self.socket = socket_stream.socket
        self._fd = socket_stream.socket.fileno()
        self._turns = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        turns = self._turns
        if turns < FAIR_TURNS:
            try:
                data = os.read(self._fd, max_bytes or 65536)
            except BlockingIOError:
                pass
            except OSError as err:
                raise _translated(err) from err
            else:
                self._turns = turns + 1
                return data
        self._turns = 0
        return await self.socket_stream.receive_some(max_bytes)

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

    async def aclose(self) -> None:
        self._fd = -1  # the number may be reused by the next socket opened: never touch it
        await self.socket_stream.aclose()


def _translated(err: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    if err.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was closed")
    return trio.BrokenResourceError(f"socket connection broken: {err}")
