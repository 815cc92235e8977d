"""nsqd's lookup loop (docs/protocol.md §5): one peer task per nsqlookupd, registering this node's
topics and channels so that consumers can find it.

Each `LookupPeer` is a task in nsqd's root nursery. It connects (1 s timeout), sends the V1
magic and IDENTIFY (this node's broadcast address and ports), registers every topic and
channel (a re-sync, after every reconnect), then sends the REGISTER/UNREGISTER notifications
queued for it as topics and channels come and go, and a PING every 15 s (the lookupd's liveness
check). Every command is one round trip with 1 s deadlines; any failure closes the connection
and the peer reconnects after a backoff (1 s doubling up to 15 s). Notifications made while a
peer is disconnected are dropped: the re-sync on reconnect states the whole truth.

`LookupPeers` owns the peers: `PUT /config/nsqlookupd_tcp_addresses` changes them live. The
lookupds' HTTP addresses learned from IDENTIFY replies are what nsqd asks, when it first sees a
topic, for the channels to create before delivering its first message (`channels_for`).
"""

from __future__ import annotations

import json
import logging
import socket
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

import trio

from .. import NSQ_VERSION
from ..goerrors import dial_error, os_error
from ..logs import go_net_error, go_struct
from ..net.addresses import split_host_port
from ..protocol.lookup_v1 import register
from ..protocol.names import is_ephemeral
from .wakeup import Wakeup

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")

MAGIC_V1 = b"  V1"
PING_INTERVAL = 15.0
COMMAND_TIMEOUT = 1.0
BACKOFF_MIN = 1.0
BACKOFF_MAX = 15.0
#: Go's lookupd HTTP client timeouts for the channel query (request 5 s, connect 2 s).
CHANNELS_QUERY_TIMEOUT = (5.0, 2.0)

_SIZE = struct.Struct(">I")
_PEER_FAILURES = (OSError, trio.TooSlowError, trio.BrokenResourceError)


class LookupPeerError(OSError):
    """The nsqlookupd answered badly or closed the connection."""


class _Logged(LookupPeerError):
    """A failure already logged in Go's words (the peer only reconnects)."""


def _topic_of(command: bytes) -> str:
    """The topic a REGISTER/UNREGISTER names."""
    return command.split()[1].decode()


def _text(command: bytes) -> str:
    """A command as go-nsq's Command.String() prints it: its line (``REGISTER t c``)."""
    return command.split(b"\n", 1)[0].decode("utf-8", "replace")


class LookupPeer:
    """The connection to one nsqlookupd, kept up by `run`."""

    def __init__(self, nsqd: NSQD, address: str) -> None:
        self.nsqd = nsqd
        self.address = address
        #: ``host:port`` of the lookupd's HTTP API, from its IDENTIFY reply (None until then).
        self.http_address: str | None = None
        self.connected = False
        self._queue: list[bytes] = []
        self._wake = Wakeup()
        self.cancel_scope = trio.CancelScope()
        # The command under way (Go's error lines name it) and the connection, if any.
        self._command_text = "IDENTIFY"
        self._stream: trio.abc.Stream | None = None

    def notify(self, command: bytes) -> None:
        """Queue a REGISTER/UNREGISTER (dropped when disconnected: the re-sync covers it)."""
        if self.connected:
            self._queue.append(command)
            self._wake.set()

    async def run(self) -> None:
        with self.cancel_scope:
            backoff = BACKOFF_MIN
            while True:
                try:
                    await self._session()
                except (
                    OSError,
                    LookupPeerError,
                    trio.TooSlowError,
                    trio.BrokenResourceError,
                ) as err:
                    if not isinstance(err, _Logged):
                        log.error(
                            "LOOKUPD(%s): %s - %s", self.address, self._command_text, self._go(err)
                        )
                    if self.connected:
                        backoff = BACKOFF_MIN
                finally:
                    self.connected = False
                    self._queue.clear()
                    self._stream = None
                    self._command_text = "IDENTIFY"
                await trio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _go(self, err: BaseException) -> str:
        """A failure as Go's lookupPeer reports it (``EOF``, ``read tcp ...: i/o timeout``,
        ``dial tcp ...: connect: connection refused``)."""
        stream = self._stream
        if stream is None:
            host, port = split_host_port(self.address)
            return dial_error(host, port, err if os_error(err) is not None else None)
        if isinstance(err, trio.TooSlowError):
            return go_net_error(stream, self.address, "read", "i/o timeout")
        if isinstance(err, LookupPeerError) or os_error(err) is None:
            return str(err) or type(err).__name__
        return go_net_error(stream, self.address, "write", err)

    async def _session(self) -> None:
        host, port = split_host_port(self.address)
        log.info("LOOKUP connecting to %s", self.address)
        with trio.fail_after(COMMAND_TIMEOUT):
            stream = await trio.open_tcp_stream(host or "127.0.0.1", port)
        async with stream:
            self._stream = stream
            await self._send(stream, MAGIC_V1)
            reply = await self._command(stream, self._identify_command())
            self._read_identify_reply(reply)
            self.connected = True
            self._queue.clear()
            # Go's connect callback: every topic and channel registered again.
            for command in self._resync_commands():
                log.info("LOOKUPD(%s): %s", self.address, _text(command))
                await self._command(stream, command)
            # PINGs keep to their interval whatever else is sent: only they (and IDENTIFY)
            # refresh this node's liveness in the lookupd.
            next_ping = trio.current_time() + PING_INTERVAL
            while True:
                with trio.move_on_at(next_ping):
                    await self._wake.wait()
                while self._queue:
                    command = self._queue.pop(0)
                    text = _text(command)
                    branch = "channel" if text.count(" ") == 2 else "topic"
                    log.info("LOOKUPD(%s): %s %s", self.address, branch, text)
                    try:
                        await self._command(stream, command)
                    except _PEER_FAILURES as err:
                        # Go logs the failure and goes on (its next command reconnects).
                        log.error("LOOKUPD(%s): %s - %s", self.address, text, self._go(err))
                        raise _Logged(str(err)) from err
                if trio.current_time() >= next_ping:
                    await self._command(stream, b"PING\n")
                    next_ping = trio.current_time() + PING_INTERVAL

    def _identify_command(self) -> bytes:
        nsqd = self.nsqd
        opts = nsqd.options
        body = json.dumps(
            {
                "version": NSQ_VERSION,
                "tcp_port": nsqd.broadcast_tcp_port,
                "http_port": nsqd.broadcast_http_port,
                "hostname": socket.gethostname(),
                "broadcast_address": opts.broadcast_address,
                "topology_zone": getattr(opts, "topology_zone", ""),
                "topology_region": getattr(opts, "topology_region", ""),
            }
        ).encode()
        return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body

    def _read_identify_reply(self, reply: bytes) -> None:
        shown = reply.decode(errors="replace")
        if reply == b"E_INVALID":
            log.info("LOOKUPD(%s): lookupd returned %s", self.address, shown)
            raise _Logged(f"IDENTIFY refused: {shown}")
        if reply.startswith(b"E_"):
            raise LookupPeerError(f"IDENTIFY refused: {shown}")
        try:
            info = json.loads(reply)
            address = str(info["broadcast_address"])
            http_port = int(info["http_port"])
        except (ValueError, KeyError, TypeError) as err:
            log.error("LOOKUPD(%s): parsing response - %s", self.address, shown)
            raise _Logged(f"bad IDENTIFY reply {reply[:100]!r}") from err
        self.http_address = (
            f"[{address}]:{http_port}" if ":" in address else f"{address}:{http_port}"
        )
        # Go's peerInfo struct, as %+v prints it.
        fields = (
            ("TCPPort", info.get("tcp_port", 0)),
            ("HTTPPort", http_port),
            ("Version", info.get("version", "")),
            ("BroadcastAddress", address),
        )
        log.info("LOOKUPD(%s): peer info %s", self.address, go_struct(fields))
        if not address:
            log.error("LOOKUPD(%s): no broadcast address", self.address)

    def _resync_commands(self) -> list[bytes]:
        commands = []
        hidden = self.nsqd.lookup.hidden
        for topic in list(self.nsqd.topics.values()):
            if topic.name in hidden:
                continue
            if not topic.channels:
                commands.append(register(topic.name))
            commands += [register(topic.name, name) for name in list(topic.channels)]
        return commands

    async def _send(self, stream: trio.abc.Stream, data: bytes) -> None:
        with trio.fail_after(COMMAND_TIMEOUT):
            await stream.send_all(data)

    async def _command(self, stream: trio.SocketStream, command: bytes) -> bytes:
        """One round trip: the command, then a ``[4-byte size][data]`` response."""
        self._command_text = _text(command)
        await self._send(stream, command)
        with trio.fail_after(COMMAND_TIMEOUT):
            size = _SIZE.unpack(await _receive_exactly(stream, 4))[0]
            if size > self.nsqd.options.max_body_size:
                raise LookupPeerError(f"response too big ({size})")
            return await _receive_exactly(stream, size)


async def _receive_exactly(stream: trio.abc.ReceiveStream, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = await stream.receive_some(count - len(data))
        if not chunk:
            raise LookupPeerError("EOF")  # Go's reader: the nsqlookupd closed the connection
        data += chunk
    return bytes(data)


class LookupPeers:
    """Every lookup peer of the daemon, following ``nsqlookupd_tcp_addresses``."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self.peers: dict[str, LookupPeer] = {}
        self._nursery: trio.Nursery | None = None
        #: Replicated topics this node does not lead (replication/topic.py): not registered.
        self.hidden: set[str] = set()

    def start(self, nursery: trio.Nursery, addresses: Iterable[str]) -> None:
        self._nursery = nursery
        self.set_addresses(addresses)

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """Connect to new lookupds and drop the ones no longer listed (PUT /config)."""
        wanted = list(dict.fromkeys(addresses))
        for address in list(self.peers):
            if address not in wanted:
                log.info("LOOKUP(%s): removing peer", address)
                self.peers.pop(address).cancel_scope.cancel()
        if self._nursery is None:
            return
        for address in wanted:
            if address not in self.peers:
                log.info("LOOKUP(%s): adding peer", address)
                peer = LookupPeer(self.nsqd, address)
                self.peers[address] = peer
                self._nursery.start_soon(peer.run, name=f"lookup-peer:{address}")

    def notify(self, command: bytes, force: bool = False) -> None:
        """Queue a REGISTER/UNREGISTER for every lookupd; a hidden topic's only if `force`."""
        if self.hidden and not force and _topic_of(command) in self.hidden:
            return
        for peer in self.peers.values():
            peer.notify(command)

    @property
    def http_addresses(self) -> list[str]:
        return [p.http_address for p in self.peers.values() if p.connected and p.http_address]

    async def channels_for(self, topic: str) -> list[str]:
        """The channels the connected lookupds know for `topic` (GET /channels), without
        ephemeral ones; lookupds that fail are logged (as Go's nsqd does) and skipped."""
        names: dict[str, None] = {}
        addresses = self.http_addresses
        if not addresses:
            return []
        # httpx is imported when first needed: a plain nsqd starts without it.
        import httpx

        request_timeout, connect_timeout = CHANNELS_QUERY_TIMEOUT
        timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
        errors: list[str] = []
        async with httpx.AsyncClient(timeout=timeout) as client:
            for address in addresses:
                endpoint = f"http://{address}/channels?topic={quote_plus(topic)}"
                log.info("CI: querying nsqlookupd %s", endpoint)
                try:
                    response = await client.get(
                        endpoint, headers={"Accept": "application/vnd.nsq; version=1.0"}
                    )
                    response.raise_for_status()
                    channels: Any = response.json().get("channels") or []
                except (httpx.HTTPError, ValueError, AttributeError) as err:
                    errors.append(str(err))
                    continue
                for name in channels:
                    if isinstance(name, str) and not is_ephemeral(name):
                        names[name] = None
        if errors:
            # Go's ClusterInfo error (an ErrList: one error a line).
            text = "\n".join(errors)
            if len(errors) == len(addresses):
                text = f"failed to query any nsqlookupd: {text}"
            log.warning(
                "failed to query nsqlookupd for channels to pre-create for topic %s - %s",
                topic,
                text,
            )
        return list(names)
