"""`ConnectionOptions`: what a client connection asks nsqd for in IDENTIFY (docs/protocol.md §1.3,
§12), plus TLS, compression and AUTH settings. Durations are in seconds."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, fields
from typing import Any

from .. import __version__

__all__ = ["ConnectionOptions"]


def _ms(seconds: float) -> int:
    """Seconds to IDENTIFY milliseconds; negative stays -1 (disabled), 0 server default."""
    return -1 if seconds < 0 else int(seconds * 1000)


@dataclass
class ConnectionOptions:
    """IDENTIFY fields and connection settings shared by `Producer` and `Consumer`.

    ``heartbeat_interval``, ``output_buffer_timeout`` and ``msg_timeout`` are seconds
    (-1 disables, 0 keeps nsqd's default), as go-nsq's durations.
    """

    heartbeat_interval: float = 30.0
    output_buffer_size: int = 0
    output_buffer_timeout: float = 0.0
    msg_timeout: float = 0.0
    sample_rate: int = 0
    user_agent: str = f"trionsq/{__version__}"
    client_id: str = ""
    hostname: str = ""
    tls_v1: bool = False
    ssl_context: ssl.SSLContext | None = None
    tls_cafile: str | None = None
    tls_certfile: str | None = None
    tls_keyfile: str | None = None
    tls_server_hostname: str | None = None
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    auth_secret: str | bytes | None = None
    connect_timeout: float = 5.0

    @classmethod
    def pick(cls, options: dict[str, Any]) -> ConnectionOptions:
        """Build from keyword options; unknown names are a TypeError."""
        names = {f.name for f in fields(cls)}
        unknown = set(options) - names
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        return cls(**options)

    def identify_body(self) -> dict[str, Any]:
        """The IDENTIFY JSON, as go-nsq sends it."""
        hostname = self.hostname or socket.gethostname()
        client_id = self.client_id or hostname.split(".")[0]
        return {
            "client_id": client_id,
            "hostname": hostname,
            "user_agent": self.user_agent,
            "feature_negotiation": True,
            "heartbeat_interval": _ms(self.heartbeat_interval),
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": _ms(self.output_buffer_timeout),
            "msg_timeout": _ms(self.msg_timeout) if self.msg_timeout > 0 else 0,
            "sample_rate": self.sample_rate,
            "tls_v1": self.tls_v1,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
        }

    def ssl_context_for_client(self) -> ssl.SSLContext:
        """The given `ssl_context`, or one built from the tls_* files."""
        if self.ssl_context is not None:
            return self.ssl_context
        context = ssl.create_default_context(cafile=self.tls_cafile)
        if self.tls_certfile:
            context.load_cert_chain(self.tls_certfile, self.tls_keyfile)
        return context
