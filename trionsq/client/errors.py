"""The exceptions trionsq.client raises: NSQ error frames as `NSQError` (with the NSQ code),
and connection trouble as `ConnectionClosedError` / `NotConnectedError`."""

from __future__ import annotations

from ..protocol.errors import FATAL

__all__ = ["ClientError", "ConnectionClosedError", "NSQError", "NotConnectedError"]


class ClientError(Exception):
    """Base class of every exception trionsq.client raises."""


class NSQError(ClientError):
    """An error frame from nsqd (or the same check done locally): `code` such as
    ``E_BAD_TOPIC``, human `text`, and whether nsqd closes the connection after it (`fatal`)."""

    def __init__(self, code: str, text: str = "") -> None:
        super().__init__(f"{code} {text}".rstrip())
        self.code = code
        self.text = text
        self.fatal = FATAL.get(code, True)

    @classmethod
    def from_frame(cls, data: bytes) -> NSQError:
        """The exception for an error frame's payload ``b"<E_CODE> <text>"``."""
        code, _, text = data.decode("utf-8", "replace").partition(" ")
        return cls(code, text)


class ConnectionClosedError(ClientError):
    """The connection ended while a command was outstanding (its outcome is unknown), or a
    command was given to a closed connection."""


class NotConnectedError(ClientError):
    """No connection to nsqd could be made (the cause is chained as ``__cause__``)."""
