"""The connections between the members of a replica set (docs/replication.md section 6).

`Peer` is this node's outbound connection to one other member, kept up by its task (one per
``--replicate-to`` address, in nsqd's nursery, reconnecting with a backoff from 100 ms to
2 s, as the lookup loop does): the V2 magic, IDENTIFY with the ``replication`` key (HMAC of
the shared secret), then replication frames. Requests go out on it (`send` for one-way
frames, `ask` for a request awaiting its answer by request ID, `request` for one whose answer
goes to a callback); answers come back on it.

`serve_inbound` serves a peer's connection to this node (handed over by protocol_v2 once
IDENTIFY carried a valid key): each request is handed to `Replication.handle_request`, in
order, and its answer sent back; a forwarded publish is answered later, once a quorum has it
(`Replication.forwarded`), by another task.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ...daemon import first_leaf
from ...net.addresses import split_host_port
from ...protocol import MAGIC_V2, identify
from ...protocol.frames import FRAME_TYPE_RESPONSE
from ..socket_stream import DirectSocketStream
from ..wakeup import Wakeup
from . import wire

if TYPE_CHECKING:
    from ..client_v2 import ClientV2
    from .node import Replication

log = logging.getLogger("trionsq.nsqd")

BACKOFF_MIN = 0.1
BACKOFF_MAX = 2.0
CONNECT_TIMEOUT = 2.0

Answer = tuple[int, dict[str, Any], bytes]


class _Signal(Protocol):
    def set(self) -> None: ...


class _Callback:
    """A `Peer.request` waiting for its answer, in place of an `ask`'s Event: `set` hands
    the answer (None: the connection dropped) to `on_answer`."""

    __slots__ = ("box", "on_answer", "peer", "rid")

    def __init__(
        self, peer: Peer, rid: int, box: list[Answer], on_answer: Callable[[Answer | None], None]
    ) -> None:
        self.peer = peer
        self.rid = rid
        self.box = box
        self.on_answer = on_answer

    def set(self) -> None:
        self.peer._pending.pop(self.rid, None)
        self.on_answer(self.box[0] if self.box else None)


class Peer:
    """This node's connection to one other member."""

    def __init__(self, repl: Replication, address: str) -> None:
        self.repl = repl
        self.address = address
        self.node_id: int | None = None
        self.connected = False
        #: Bytes queued for the connection and not yet sent.
        self.out = bytearray()
        self._wake = Wakeup()
        self._next_rid = 0
        self._pending: dict[int, tuple[_Signal, list[Answer]]] = {}
        self.error = ""
        #: The connection is over TLS.
        self.tls = False
        self.connections = 0
        self._sending = False
        self._fd = -1

    # -- sending ----------------------------------------------------------------------------

    def send(self, frame: bytes) -> bool:
        """Send a frame: at once when nothing is queued before it and the socket takes it
        (no scheduler round trip on the publish path), else queued for the sender task.
        False (dropped) while disconnected."""
        if not self.connected:
            return False
        if not self.out and not self._sending and self._fd >= 0:
            try:
                sent = os.write(self._fd, frame)
            except OSError:
                sent = 0  # would block, or broken: the sender task finds out
            if sent == len(frame):
                return True
            frame = frame[sent:]
        self.out += frame
        self._wake.set()
        return True

    async def ask(
        self, kind: int, header: dict[str, Any], blob: bytes = b"", timeout: float = 5.0
    ) -> Answer | None:
        """Send a request and wait for its answer (None: disconnected or timed out)."""
        if not self.connected:
            return None
        self._next_rid += 1
        rid = self._next_rid
        event = trio.Event()
        box: list[Answer] = []
        self._pending[rid] = (event, box)
        self.send(wire.encode(kind, {**header, "rid": rid}, blob))
        try:
            with trio.move_on_after(timeout):
                await event.wait()
        finally:
            self._pending.pop(rid, None)
        return box[0] if box else None

    def request(
        self,
        kind: int,
        header: dict[str, Any],
        blob: bytes,
        on_answer: Callable[[Answer | None], None],
    ) -> int | None:
        """Send a request whose answer is handed to `on_answer` by the receiving task (None
        if the connection drops first), without a task waiting for it. Returns its request
        ID (for `forget`), or None: not connected, nothing sent."""
        if not self.connected:
            return None
        self._next_rid += 1
        rid = self._next_rid
        box: list[Answer] = []
        self._pending[rid] = (_Callback(self, rid, box, on_answer), box)
        self.send(wire.encode(kind, {**header, "rid": rid}, blob))
        return rid

    def forget(self, rid: int) -> None:
        """Stop waiting for a `request`'s answer (it timed out)."""
        self._pending.pop(rid, None)

    # -- the connection ---------------------------------------------------------------------

    async def run(self) -> None:
        backoff = BACKOFF_MIN
        while True:
            try:
                await self._session()
            except* (
                OSError,
                trio.TooSlowError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                wire.WireError,
            ) as group:
                err = first_leaf(group)
                message = str(err) or type(err).__name__
                if message != self.error:
                    log.error("REPLICATION(%s): %s", self.address, message)
                self.error = message
                if self.connected:
                    backoff = BACKOFF_MIN
            finally:
                was = self.connected
                self.connected = False
                self._fd = -1
                self.out.clear()
                pending, self._pending = self._pending, {}
                for event, _ in pending.values():
                    event.set()
                if was:
                    self.repl.peer_disconnected(self)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _session(self) -> None:
        host, port = split_host_port(self.address)
        with trio.fail_after(CONNECT_TIMEOUT):
            socket_stream = await trio.open_tcp_stream(host or "127.0.0.1", port)
        # Direct socket calls, but no busy polling: members share the machine's cores with
        # each other in the benchmarks, where spinning replicas cost the primary 20 % of its
        # MPUB throughput (bench/README.md, "Replicated topics").
        stream: trio.abc.Stream = DirectSocketStream(socket_stream, 0.0)
        async with stream:
            options = self.repl.nsqd.options
            tls_context = self.repl.client_tls_context()
            key = wire.identify_key(options.replication_secret, options.node_id)
            body = {
                "client_id": f"replication-{options.node_id}",
                "hostname": options.broadcast_address,
                "feature_negotiation": True,
                "heartbeat_interval": -1,
                "user_agent": "trionsq-replication",
                "tls_v1": tls_context is not None,
                "replication": key,
            }
            with trio.fail_after(CONNECT_TIMEOUT):
                await stream.send_all(MAGIC_V2 + identify(body))
                frame_type, data = await _read_nsq_frame(stream)
            if frame_type != FRAME_TYPE_RESPONSE:
                raise wire.WireError(wire.refusal(data.decode("utf-8", "replace")))
            try:
                reply = json.loads(data)
            except ValueError:
                reply = {}
            raw = reply.get("replication") if isinstance(reply, dict) else None
            self.node_id, proof = wire.check_reply_key(
                options.replication_secret, key, raw, options.node_id
            )
            if tls_context is not None:
                if not reply.get("tls_v1"):
                    raise wire.WireError("the peer did not agree to TLS (has it --tls-cert?)")
                stream = trio.SSLStream(stream, tls_context, server_hostname=host or "127.0.0.1")
                with trio.fail_after(CONNECT_TIMEOUT):
                    await stream.do_handshake()
                    frame_type, data = await _read_nsq_frame(stream)
                if frame_type != FRAME_TYPE_RESPONSE or data != b"OK":
                    raise wire.WireError("TLS upgrade refused")
            self.tls = tls_context is not None
            await stream.send_all(proof)
            # Frames go out straight to the socket (`send`) only in plaintext.
            self._fd = -1 if tls_context is not None else socket_stream.socket.fileno()
            self.connected = True
            self.connections += 1
            self.error = ""
            log.info("REPLICATION(%s): connected to node %d", self.address, self.node_id)
            self.repl.peer_connected(self)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._sender, stream)
                await self._receiver(stream)
                nursery.cancel_scope.cancel()

    async def _sender(self, stream: trio.abc.Stream) -> None:
        while True:
            await self._wake.wait()
            while self.out:
                data, self.out = self.out, bytearray()
                self._sending = True
                try:
                    await stream.send_all(data)
                finally:
                    self._sending = False

    async def _receiver(self, stream: trio.abc.Stream) -> None:
        reader = wire.FrameReader(stream)
        while True:
            kind, header, blob = await reader.next()
            if kind == wire.DELETED:
                self.repl.deleted_by_peer(self, header)
            rid = header.get("rid")
            if isinstance(rid, int):
                waiting = self._pending.get(rid)
                if waiting is not None:
                    waiting[1].append((kind, header, blob))
                    waiting[0].set()
                continue
            assert self.node_id is not None
            self.repl.handle_answer(self, kind, header, blob)


async def _read_nsq_frame(stream: trio.abc.ReceiveStream) -> tuple[int, bytes]:
    data = bytearray()
    while len(data) < 8:
        chunk = await stream.receive_some(8 - len(data))
        if not chunk:
            raise trio.BrokenResourceError("connection closed during IDENTIFY")
        data += chunk
    size, frame_type = struct.unpack(">Ii", data[:8])
    if size > 1024 * 1024:
        raise wire.WireError("IDENTIFY reply too large")
    need = size - 4
    body = bytearray()
    while len(body) < need:
        chunk = await stream.receive_some(need - len(body))
        if not chunk:
            raise trio.BrokenResourceError("connection closed during IDENTIFY")
        body += chunk
    return frame_type, bytes(body)


async def serve_inbound(repl: Replication, client: ClientV2, inbound: wire.Inbound) -> None:
    """Serve a peer's requests on its connection to this node until it closes (once its
    first frame proved it knows the secret, `wire.Inbound.check_proof`)."""
    stream = client.stream
    if isinstance(stream, DirectSocketStream):
        # No busy polling on replication links (see `Peer._session`).
        stream = DirectSocketStream(stream.socket_stream, 0.0)
    reader = wire.FrameReader(stream)
    peer_id = inbound.peer
    try:
        with trio.fail_after(CONNECT_TIMEOUT):
            kind, header, _ = await reader.next()
        inbound.check_proof(repl.nsqd.options.replication_secret, kind, header)
    except (
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        wire.WireError,
        OSError,
    ) as err:
        log.error("REPLICATION: node %d refused (%s) - %s", peer_id, client.remote_address, err)
        return
    log.info("REPLICATION: node %d connected (%s)", peer_id, client.remote_address)
    lock = trio.Lock()

    async def send(data: bytes) -> None:
        # Answers sent later by other tasks (a forwarded publish's, once a quorum has it; a
        # forwarded admin action's, once done): one sender at a time (the lock is taken
        # without a checkpoint when free, the usual case).
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            await stream.send_all(data)
        finally:
            lock.release()

    try:
        while True:
            # Every request already received is handled before the answers go out together,
            # and of a run of MSGS for one topic only the last ACK (acknowledgements are
            # cumulative): one write and one ACK per batch under load.
            out: list[bytes] = []
            acks: dict[str, bytes] = {}
            written: set[str] = set()
            while True:
                kind, header, blob = await reader.next()
                if kind == wire.PUB_FORWARD:
                    answers = repl.forwarded(peer_id, header, blob, send)
                elif kind == wire.FORWARD:
                    repl.spawn(repl.answer_forward, peer_id, header, send)
                    answers = []
                else:
                    answers = await repl.handle_request(peer_id, kind, header, blob)
                if kind == wire.MSGS and len(answers) == 1 and answers[0][4] == wire.ACK:
                    acks[header["topic"]] = answers[0]
                    written.add(header["topic"])
                else:
                    out += acks.values()
                    acks.clear()
                    out += answers
                if not reader.ready():
                    break
            if written and repl.nsqd.options.sync_ack:
                # --sync-ack: a member acknowledges what it has fsynced.
                await repl.fsync_logs(written)
            out += acks.values()
            if out:
                await send(b"".join(out))
    except (trio.BrokenResourceError, trio.ClosedResourceError, wire.WireError, OSError) as err:
        log.info("REPLICATION: node %d disconnected - %s", peer_id, err)
