"""NSQ protocol error codes, their fatality, and the ProtocolError value raised by parsers."""

from __future__ import annotations

E_BAD_PROTOCOL = "E_BAD_PROTOCOL"
E_INVALID = "E_INVALID"
E_BAD_BODY = "E_BAD_BODY"
E_BAD_TOPIC = "E_BAD_TOPIC"
E_BAD_CHANNEL = "E_BAD_CHANNEL"
E_BAD_MESSAGE = "E_BAD_MESSAGE"
E_PUB_FAILED = "E_PUB_FAILED"
E_MPUB_FAILED = "E_MPUB_FAILED"
E_DPUB_FAILED = "E_DPUB_FAILED"
E_SUB_FAILED = "E_SUB_FAILED"
E_IDENTIFY_FAILED = "E_IDENTIFY_FAILED"
E_AUTH_DISABLED = "E_AUTH_DISABLED"
E_AUTH_FAILED = "E_AUTH_FAILED"
E_AUTH_FIRST = "E_AUTH_FIRST"
E_UNAUTHORIZED = "E_UNAUTHORIZED"
E_FIN_FAILED = "E_FIN_FAILED"
E_REQ_FAILED = "E_REQ_FAILED"
E_TOUCH_FAILED = "E_TOUCH_FAILED"

#: Whether nsqd closes the connection after sending each error (docs/protocol.md §1.4).
FATAL: dict[str, bool] = {
    E_BAD_PROTOCOL: True,
    E_INVALID: True,
    E_BAD_BODY: True,
    E_BAD_TOPIC: True,
    E_BAD_CHANNEL: True,
    E_BAD_MESSAGE: True,
    E_PUB_FAILED: True,
    E_MPUB_FAILED: True,
    E_DPUB_FAILED: True,
    E_SUB_FAILED: True,
    E_IDENTIFY_FAILED: True,
    E_AUTH_DISABLED: True,
    E_AUTH_FAILED: True,
    E_AUTH_FIRST: True,
    E_UNAUTHORIZED: True,
    E_FIN_FAILED: False,
    E_REQ_FAILED: False,
    E_TOUCH_FAILED: False,
}


class ProtocolError(Exception):
    """An NSQ error: `code` (e.g. ``E_INVALID``), human `text`, and whether it is `fatal`.

    On the wire it is an error frame whose body is ``"<code> <text>"``.
    """

    def __init__(self, code: str, text: str, fatal: bool | None = None) -> None:
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text
        self.fatal = FATAL.get(code, True) if fatal is None else fatal

    @property
    def body(self) -> bytes:
        """The error frame's payload. Client bytes decoded with ``surrogateescape`` into
        `text` go back out as the raw bytes, as nsqd echoes them."""
        return f"{self.code} {self.text}".encode("utf-8", "surrogateescape")

    def __repr__(self) -> str:
        return f"ProtocolError({self.code!r}, {self.text!r}, fatal={self.fatal})"
