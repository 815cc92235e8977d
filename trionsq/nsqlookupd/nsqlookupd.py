"""`NSQLookupd`: the registration DB and the daemon's nursery tree.

```
NSQLookupd.run()  root nursery
 ├─ TCP listener ─ one task per connection (the V1 command loop)
 └─ HTTP server (hypercorn)
```
Both addresses are bound before either is announced (``TCP: listening on ...``, then
``HTTP: listening on ...``, on stderr as Go logs them). Nothing persists: the registrations are
rebuilt from the nsqd connections. Shutdown (`request_exit`) closes the listeners and every
connection; each connection's registrations go with it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import trio

from ..daemon import StartupError as StartupError  # re-exported: run() raises it
from ..daemon import listen_failed, start_http
from ..net.addresses import split_host_port
from ..request_counts import RequestCounts
from ..version import build_description
from .http_api import serve_http
from .lookup_protocol_v1 import LookupProtocolV1
from .options import NSQLookupdOptions
from .registration_db import Clock, RegistrationDB
from .tcp import format_address, handle_connection

log = logging.getLogger("trionsq.nsqlookupd")


def _host_port(address: str) -> tuple[str, int]:
    """Go's net.Listen address: ``host:port``; an empty address is any host, any port."""
    return split_host_port(address or ":0")


def _bound(listener: trio.SocketListener) -> tuple[str, int]:
    name = listener.socket.getsockname()
    return name[0], name[1]


class NSQLookupd:
    """One nsqlookupd: `run` serves until `request_exit`."""

    def __init__(self, options: NSQLookupdOptions, clock: Clock = trio.current_time) -> None:
        """`clock` times liveness and tombstones (tests may pass their own)."""
        self.options = options
        self.db = RegistrationDB(clock)
        self.protocol = LookupProtocolV1(self)
        #: HTTP requests answered, by route and status (``/metrics``).
        self.requests = RequestCounts()
        #: The bound ``(host, port)`` of each listener, once `run` has started.
        self.tcp_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        self._nursery: trio.Nursery | None = None
        self._exit = trio.Event()
        self._exited = trio.Event()

    @property
    def exiting(self) -> bool:
        """The shutdown has begun."""
        return self._exit.is_set()

    @property
    def tcp_port(self) -> int:
        return self.tcp_address[1] if self.tcp_address else 0

    @property
    def http_port(self) -> int:
        return self.http_address[1] if self.http_address else 0

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, serve until `request_exit`, then close everything."""
        log.info("%s", build_description("nsqlookupd"))
        listeners = await self._open_tcp_listeners()
        tcp = format_address(*_bound(listeners[0]))
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._start_http(nursery)
                log.info("TCP: listening on %s", tcp)
                if self.http_address is not None:
                    log.info("HTTP: listening on %s", format_address(*self.http_address))
                nursery.start_soon(
                    functools.partial(
                        trio.serve_listeners,
                        self._handler,
                        listeners,
                        handler_nursery=nursery,
                    ),
                    name="tcp-listener",
                )
                task_status.started(self)
                await self._exit.wait()
                nursery.cancel_scope.cancel()
            # Go's servers' last lines, once their connections are done.
            log.info("TCP: closing %s", tcp)
            if self.http_address is not None:
                log.info("HTTP: closing %s", format_address(*self.http_address))
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)
            self._nursery = None
            self._exited.set()

    async def _open_tcp_listeners(self) -> list[trio.SocketListener]:
        address = self.options.tcp_address
        try:
            host, port = _host_port(address)
            # trio sets SO_REUSEADDR, so a restart right after a kill can rebind the port.
            listeners = await trio.open_tcp_listeners(port, host=host or None)
        except (OSError, ValueError) as err:
            raise listen_failed(address, err, "nsqlookupd") from err
        self.tcp_address = _bound(listeners[0])
        return listeners

    async def _start_http(self, nursery: trio.Nursery) -> None:
        self.http_address = await start_http(
            nursery, functools.partial(serve_http, self), self.options.http_address, "nsqlookupd"
        )

    async def _handler(self, stream: trio.SocketStream) -> None:
        await handle_connection(self, stream)

    def handle_stream(self, stream: trio.abc.Stream, remote: str) -> None:
        """Serve an already connected stream as the TCP connection of peer `remote`
        (``ip:port``) in the daemon's nursery (tests hand in in-memory streams)."""
        assert self._nursery is not None, "NSQLookupd is not running"
        self._nursery.start_soon(handle_connection, self, stream, remote)

    def request_exit(self) -> None:
        """Begin the shutdown (idempotent)."""
        self._exit.set()

    async def wait_exited(self) -> None:
        await self._exited.wait()
