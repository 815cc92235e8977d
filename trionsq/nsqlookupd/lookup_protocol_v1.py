"""nsqlookupd's TCP protocol V1 (docs/protocol.md §6.1): one connection's command loop and the
commands (PING, IDENTIFY, REGISTER, UNREGISTER) executed against the registration DB.

The loop feeds what it receives to the sans-IO `trionsq.protocol.lookup_v1.LookupParser`,
executes every complete command and sends the answers of one read together. Every error is
fatal: its answer is sent and the connection closed. When the connection ends, its peer is
removed from every registration (the keys stay).
"""

from __future__ import annotations

import logging
import socket
from collections import Counter
from typing import TYPE_CHECKING

import trio

from .. import NSQ_VERSION
from ..http_common import go_json
from ..logs import CLOSED_CONNECTION, go_net_error
from ..options import format_duration
from ..protocol.errors import E_INVALID, ProtocolError
from ..protocol.lookup_v1 import (
    LookupCommand,
    LookupParser,
    decode_identify,
    encode_lookup_response,
    topic_and_channel,
)
from ..protocol.names import is_ephemeral
from .registration_db import CHANNEL, CLIENT_KEY, TOPIC, PeerInfo, Producer, Registration

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

log = logging.getLogger("trionsq.nsqlookupd")

OK = b"OK"
READ_SIZE = 65536


class ClientV1:
    """One nsqd connection: its remote ``ip:port`` and, once identified, its peer info."""

    __slots__ = ("peer_info", "remote")

    def __init__(self, remote: str) -> None:
        self.remote = remote
        self.peer_info: PeerInfo | None = None

    def __str__(self) -> str:
        return self.remote


_COMMANDS = frozenset(("PING", "IDENTIFY", "REGISTER", "UNREGISTER"))


class LookupProtocolV1:
    """The V1 commands of one nsqlookupd."""

    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.db = lookupd.db
        #: For ``/metrics``: commands executed, by name (any unknown one as ``invalid``), and
        #: the V1 connections open now.
        self.commands: Counter[str] = Counter()
        self.connections = 0

    async def io_loop(
        self, client: ClientV1, stream: trio.abc.Stream, data: bytes = b""
    ) -> str | None:
        """Serve `client` on `stream` (`data`: bytes already read after the magic) until it
        closes, sends a bad command, or the daemon exits; then unregister it everywhere.
        Returns the error that ended it as Go's IOLoop returns it (``EOF`` when the peer
        closed: Go's nsqlookupd logs that too), for the caller's ``client(...) - ...``."""
        exit_error: str | None = None
        op = "read"  # what a stream error interrupted (Go's error says)

        def check_line(name: str, params: tuple[str, ...]) -> None:
            if name == "IDENTIFY" and client.peer_info is not None:
                raise ProtocolError(E_INVALID, "cannot IDENTIFY again")

        parser = LookupParser(check_line)
        parser.feed(data)
        self.connections += 1
        try:
            while True:
                out: list[bytes] = []
                failed = False
                try:
                    while (command := parser.next_command()) is not None:
                        out.append(encode_lookup_response(self.exec(client, command)))
                except ProtocolError as err:
                    out.append(self._error(client, err))
                    exit_error = str(err)
                    failed = True  # every nsqlookupd error is fatal
                if out:
                    op = "write"
                    await stream.send_all(b"".join(out))
                if failed:
                    break
                op = "read"
                data = bytes(await stream.receive_some(READ_SIZE))
                if not data:
                    exit_error = "EOF"
                    try:
                        parser.eof()
                    except ProtocolError as err:
                        cause = "unexpected EOF" if parser.buffered else "EOF"
                        exit_error = str(err)
                        op = "write"
                        await stream.send_all(self._error(client, err, cause))
                    break
                parser.feed(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as err:
            exit_error = go_net_error(stream, client.remote, op, err)
        except trio.Cancelled:
            if self.lookupd.exiting:  # Go's shutdown closes every connection under its read
                exit_error = go_net_error(stream, client.remote, "read", CLOSED_CONNECTION)
            raise
        finally:
            self.connections -= 1
            log.info("PROTOCOL(V1): [%s] exiting ioloop", client)
            self.unregister_client(client)
        return exit_error

    @staticmethod
    def _error(client: ClientV1, err: ProtocolError, cause: str = "") -> bytes:
        """Go's ``[addr] - <error>[ - <the read error behind it>]``; the error's answer."""
        log.error("[%s] - %s%s", client, err, f" - {cause}" if cause else "")
        return encode_lookup_response(err.body)

    def unregister_client(self, client: ClientV1) -> None:
        """The connection ended: remove its peer from every registration."""
        peer = client.peer_info
        if peer is None:
            return
        for key in self.db.lookup_registrations(peer.id):
            removed, _ = self.db.remove_producer(key, peer.id)
            if removed:
                self._log_db(client, "UNREGISTER", key)

    def exec(self, client: ClientV1, command: LookupCommand) -> bytes:
        """Execute one command; its answer, or `ProtocolError`."""
        name = command.name
        self.commands[name if name in _COMMANDS else "invalid"] += 1
        if name == "PING":
            return self.ping(client)
        if name == "IDENTIFY":
            assert command.body is not None
            return self.identify(client, command.body)
        if name == "REGISTER":
            return self.register(client, command.params)
        if name == "UNREGISTER":
            return self.unregister(client, command.params)
        raise ProtocolError(E_INVALID, f"invalid command {name}")

    # -- the commands ---------------------------------------------------------------------

    def ping(self, client: ClientV1) -> bytes:
        """OK; from an identified peer, also a sign of life."""
        peer = client.peer_info
        if peer is not None:
            since = round((self.db.clock() - peer.last_update) * 1e9)
            log.info("CLIENT(%s): pinged (last ping %s)", peer.id, format_duration(since))
            self.db.touch(peer)
        return OK

    def identify(self, client: ClientV1, body: bytes) -> bytes:
        """Record the peer (category ``client``); answer with this nsqlookupd's addresses."""
        fields = decode_identify(body)
        peer = PeerInfo(client.remote, remote_address=client.remote, **fields._asdict())
        self.db.touch(peer)
        log.info(
            "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
            client,
            peer.broadcast_address,
            peer.tcp_port,
            peer.http_port,
            peer.version,
        )
        client.peer_info = peer
        if self.db.add_producer(CLIENT_KEY, Producer(peer)):
            self._log_db(client, "REGISTER", CLIENT_KEY)
        lookupd = self.lookupd
        # Go's json.Marshal of a map: keys sorted.
        answer = {
            "broadcast_address": lookupd.options.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": lookupd.http_port,
            "tcp_port": lookupd.tcp_port,
            "version": NSQ_VERSION,
        }
        return go_json(answer).encode()

    def register(self, client: ClientV1, params: tuple[str, ...]) -> bytes:
        """Add the peer to the channel (if named) and to the topic."""
        peer = self._identified(client)
        topic, channel = topic_and_channel("REGISTER", params)
        if channel:
            key = Registration(CHANNEL, topic, channel)
            if self.db.add_producer(key, Producer(peer)):
                self._log_db(client, "REGISTER", key)
        key = Registration(TOPIC, topic, "")
        if self.db.add_producer(key, Producer(peer)):
            self._log_db(client, "REGISTER", key)
        return OK

    def unregister(self, client: ClientV1, params: tuple[str, ...]) -> bytes:
        """Remove the peer from the channel; without a channel, from every channel of the topic
        and from the topic. An #ephemeral channel or topic left without producers goes."""
        peer = self._identified(client)
        topic, channel = topic_and_channel("UNREGISTER", params)
        db = self.db
        if channel:
            key = Registration(CHANNEL, topic, channel)
            removed, left = db.remove_producer(key, peer.id)
            if removed:
                self._log_db(client, "UNREGISTER", key)
            if left == 0 and is_ephemeral(channel):
                db.remove_registration(key)
            return OK
        # A topic unregistration: nsqd unregisters its channels first, so removing the peer
        # from one here is unexpected.
        for key in db.find_registrations(CHANNEL, topic, "*"):
            removed, _ = db.remove_producer(key, peer.id)
            if removed:
                log.warning(
                    "client(%s) unexpected UNREGISTER category:%s key:%s subkey:%s",
                    client,
                    CHANNEL,
                    topic,
                    key.subkey,
                )
        key = Registration(TOPIC, topic, "")
        removed, left = db.remove_producer(key, peer.id)
        if removed:
            self._log_db(client, "UNREGISTER", key)
        if left == 0 and is_ephemeral(topic):
            db.remove_registration(key)
        return OK

    @staticmethod
    def _identified(client: ClientV1) -> PeerInfo:
        if client.peer_info is None:
            raise ProtocolError(E_INVALID, "client must IDENTIFY")
        return client.peer_info

    @staticmethod
    def _log_db(client: ClientV1, action: str, key: Registration) -> None:
        log.info(
            "DB: client(%s) %s category:%s key:%s subkey:%s",
            client,
            action,
            key.category,
            key.key,
            key.subkey,
        )
