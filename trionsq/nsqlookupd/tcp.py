"""nsqlookupd's TCP connections: read the 4-byte protocol magic, hand a ``"  V1"`` connection
to the V1 command loop, answer anything else with ``E_BAD_PROTOCOL`` and close."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from ..logs import go_net_error
from ..protocol.lookup_v1 import MAGIC_V1, encode_lookup_response
from .lookup_protocol_v1 import READ_SIZE, ClientV1

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

log = logging.getLogger("trionsq.nsqlookupd")

_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def format_address(host: str, port: int) -> str:
    """``host:port`` as Go prints a TCP address (``[v6]:port``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def remote_address(stream: trio.abc.Stream) -> str:
    """The peer's ``ip:port`` of a socket stream (the peer id nsqlookupd registers)."""
    sock = getattr(stream, "socket", None)
    if sock is None:
        return "unknown:0"
    name = sock.getpeername()
    if isinstance(name, tuple):
        return format_address(name[0], name[1])
    return str(name) or "unix"


async def handle_connection(
    lookupd: NSQLookupd, stream: trio.abc.Stream, remote: str | None = None
) -> None:
    """Serve one TCP connection until it ends; `remote` names the peer when `stream` is not a
    socket (tests' in-memory streams)."""
    if remote is None:
        try:
            remote = remote_address(stream)
        except OSError:  # already disconnected
            await trio.aclose_forcefully(stream)
            return
    log.info("TCP: new client(%s)", remote)
    try:
        data = b""
        while len(data) < 4:
            chunk = await stream.receive_some(READ_SIZE)
            if not chunk:
                reason = "unexpected EOF" if data else "EOF"
                log.error("failed to read protocol version - %s", reason)
                return
            data += chunk
        magic = data[:4]
        shown = magic.decode("utf-8", "backslashreplace")
        log.info("CLIENT(%s): desired protocol magic '%s'", remote, shown)
        if magic != MAGIC_V1:
            await stream.send_all(encode_lookup_response(b"E_BAD_PROTOCOL"))
            log.error("client(%s) bad protocol magic '%s'", remote, shown)
            return
        exit_error = await lookupd.protocol.io_loop(ClientV1(remote), stream, data[4:])
        if exit_error:
            log.error("client(%s) - %s", remote, exit_error)
    except _STREAM_ERRORS as err:
        log.error("failed to read protocol version - %s", go_net_error(stream, remote, "read", err))
    finally:
        await trio.aclose_forcefully(stream)
