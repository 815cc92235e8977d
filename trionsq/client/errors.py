"""The exceptions trionsq.client raises, all `ClientError`s: NSQ error frames as `NSQError`
(with the NSQ code), a connection that could not be made as `NotConnectedError` (refused,
unreachable, reset or closed during the handshake, timed out; `TLSError` when the TLS upgrade
failed), a reply outside the protocol as `ProtocolError`, and a connection lost with commands
outstanding as `ConnectionClosedError`."""

from __future__ import annotations

from ..protocol.errors import FATAL

__all__ = [
    "ClientError",
    "ConnectionClosedError",
    "NSQError",
    "NotConnectedError",
    "ProtocolError",
    "TLSError",
]


class ClientError(Exception):
    """Base class of every exception trionsq.client raises (raised itself only when nsqd
    requires AUTH and no ``auth_secret`` was given)."""


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
    """No connection to nsqd could be made: refused, unreachable, a name that does not resolve
    (the text is Go's, ``dial tcp 127.0.0.1:4150: connect: connection refused``), reset or
    closed by nsqd during the handshake, or no answer within ``connect_timeout``. The cause is
    chained as ``__cause__``."""


class TLSError(NotConnectedError):
    """The TLS upgrade failed: nsqd's certificate is not trusted or the handshake broke, or
    the client's own TLS files (``tls_cafile``, ``tls_certfile``, ``tls_keyfile``) cannot be
    used."""


class ProtocolError(ClientError):
    """nsqd (or whatever listens there) answered outside the protocol: an IDENTIFY reply that
    is not NSQ's JSON, an unexpected answer to a TLS/snappy/deflate upgrade or AUTH."""
