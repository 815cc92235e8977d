"""What nsqd does before its daemon code is imported, as Go's nsqd.New does before it serves,
in its order: lock the data path, build the TLS context, log the version, check the data path
(beyond Go) and open the TCP, HTTP and HTTPS listening sockets (plain `socket`, no trio).

From then on the kernel queues connections, so a client that connects while trio, hypercorn
and quart are still being imported (a few hundred ms) waits to be served rather than being
refused: a test harness that starts nsqd and sleeps a fixed time (go-nsq's test.sh: 0.3 s) does
not race its start-up. The daemon adopts the sockets (`Opened`); an in-process nsqd (the tests)
opens them the same way when it starts.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from ..daemon import StartupError, listen_failed
from ..diskqueue.fs import FileSystem
from ..net.addresses import split_host_port
from ..version import build_description
from .data_path import DataPathError, check_writable, lock_data_path
from .options import NSQDOptions
from .tls_config import build_tls_context

log = logging.getLogger("trionsq.nsqd")


@dataclass
class Opened:
    """The locked data path, the TLS context and the listening sockets, until the daemon
    adopts them."""

    lock_handle: int
    tls_context: ssl.SSLContext | None = None
    tcp: list[socket.socket] = field(default_factory=list)
    http: socket.socket | None = None
    https: socket.socket | None = None

    def adopt_http(self, *, tls: bool = False) -> int:
        """The HTTP (`tls`: HTTPS) socket's descriptor, given up to the HTTP server
        (hypercorn's ``fd://``)."""
        sock = self.https if tls else self.http
        assert sock is not None
        if tls:
            self.https = None
        else:
            self.http = None
        return sock.detach()

    def close_sockets(self) -> None:
        """Close the sockets not adopted (nsqd did not get as far)."""
        for sock in [*self.tcp, self.http, self.https]:
            if sock is not None:
                sock.close()
        self.tcp, self.http, self.https = [], None, None


def open_nsqd(options: NSQDOptions, fs: FileSystem, data_path: str) -> Opened:
    """Lock `data_path`, build the TLS context, log the version and ID, check the data path
    and listen where `options` say, in Go's order; `StartupError` (Go's FATAL text) if any
    step fails (the lock and the sockets are released then)."""
    try:
        lock_handle = lock_data_path(fs, data_path)
    except DataPathError as err:
        raise StartupError(f"failed to instantiate nsqd - {err}") from err
    opened = Opened(lock_handle)
    try:
        opened.tls_context = build_tls_context(options)
        log.info("%s", build_description("nsqd"))
        log.info("ID: %d", options.node_id)
        try:
            check_writable(fs, data_path)
        except DataPathError as err:
            raise StartupError(f"failed to instantiate nsqd - {err}") from err
        opened.tcp = _listen_tcp(options.tcp_address)
        if options.http_address:
            opened.http = _listen_http(options.http_address)
        if options.https_address and opened.tls_context is not None:
            opened.https = _listen_http(options.https_address)
    except BaseException:
        opened.close_sockets()
        fs.unlock_dir(lock_handle)
        raise
    return opened


def is_unix_path(address: str) -> bool:
    """nsqd's --tcp-address names a Unix socket (a path) rather than ``host:port``."""
    return address.startswith("/") or address.startswith("./") or ":" not in address


def _listen_tcp(address: str) -> list[socket.socket]:
    """The TCP listener(s): a Unix socket for a path, else one socket per address family the
    host resolves to (an empty host: IPv4 and IPv6, as trio.open_tcp_listeners binds)."""
    try:
        if is_unix_path(address):
            if os.path.exists(address):
                os.unlink(address)
            return [_listening(socket.AF_UNIX, address)]
        host, port = split_host_port(address)
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        sockets: list[socket.socket] = []
        try:
            for family, _, _, _, sockaddr in dict.fromkeys(infos):
                sockets.append(_listening(family, sockaddr))
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return sockets
    except (OSError, ValueError) as err:
        network = "unix" if is_unix_path(address) else "tcp"
        raise listen_failed(address, err, "nsqd", network) from err


def _listen_http(address: str) -> socket.socket:
    """The HTTP (or HTTPS) listener: one socket, IPv4 for an empty host (as hypercorn binds
    ``:port``)."""
    try:
        host, port = split_host_port(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        infos = socket.getaddrinfo(
            host or None, port, family, socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        return _listening(infos[0][0], infos[0][4])
    except (OSError, ValueError) as err:
        raise listen_failed(address, err, "nsqd") from err


def _listening(family: int, sockaddr: str | tuple[Any, ...]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family != socket.AF_UNIX:
            # A restart right after a kill can rebind the port (trio and Go set it too).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock
