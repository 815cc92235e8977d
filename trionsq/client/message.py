"""`Message`: a delivered message with the calls that answer it (`finish`, `requeue`,
`touch`). They buffer the command on the message's connection and return at once."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ..protocol import commands
from .errors import ConnectionClosedError

if TYPE_CHECKING:
    from .connection import Connection
    from .consumer import Consumer

__all__ = ["Message"]

_HEADER = struct.Struct(">qH16s")


class Message:
    """A message delivered to a `Consumer`: `id` (16 hex bytes), `body`, `timestamp` (ns),
    `attempts` (1 on first delivery), and the connection (`nsqd_address`) it came on."""

    __slots__ = ("_conn", "_consumer", "attempts", "body", "id", "responded", "timestamp")

    def __init__(self, payload: bytes, conn: Connection, consumer: Consumer | None) -> None:
        self.timestamp, self.attempts, self.id = _HEADER.unpack_from(payload)
        self.body = payload[26:]
        self._conn = conn
        self._consumer = consumer
        #: Whether FIN or REQ was sent (the message is no longer in flight).
        self.responded = False

    def __repr__(self) -> str:
        return f"<Message {self.id.decode()} attempts={self.attempts} {len(self.body)} B>"

    @property
    def nsqd_address(self) -> str:
        return self._conn.address

    def _send(self, data: bytes) -> bool:
        try:
            self._conn.send(data)
        except ConnectionClosedError:
            return False  # nsqd times the message out and redelivers it
        return True

    def finish(self) -> None:
        """FIN: the message was processed. A no-op once answered."""
        if self.responded:
            return
        self.responded = True
        self._send(commands.fin(self.id))
        self._answered(success=True)

    def requeue(self, delay: float | None = None, backoff: bool = True) -> None:
        """REQ: deliver again after `delay` seconds (default: the consumer's requeue delay
        times attempts, capped); `backoff` counts it as a failure for the consumer's backoff."""
        if self.responded:
            return
        self.responded = True
        if delay is None:
            delay = self._consumer.requeue_delay_for(self) if self._consumer else 0.0
        self._send(commands.req(self.id, max(0, int(delay * 1000))))
        self._answered(success=not backoff, neutral=not backoff)

    def touch(self) -> None:
        """TOUCH: reset the message's timeout on nsqd."""
        if not self.responded:
            self._send(commands.touch(self.id))

    def _answered(self, success: bool, neutral: bool = False) -> None:
        conn = self._conn
        conn.in_flight -= 1
        if self._consumer is not None:
            self._consumer._message_answered(conn, success, neutral)
