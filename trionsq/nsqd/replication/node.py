"""Replicated topics (docs/replication.md, spec/replication.py): `Replication`, nsqd's part
that exists only with ``--replicate-to``. It owns the peers (one `Peer` task per other member,
peer.py), which topics are replicated (``--replicate-topic``), the epochs read
from nsqd.dat until their topics exist, the dispatch of the peers' requests and answers to
each topic's `TopicReplica` (topic.py), and PUB's wait for a quorum.

```
NSQD.run() root nursery
 ├─ one replication peer task per --replicate-to address (reconnect with backoff)
 ├─ one task per replicated topic (heartbeats, FIN batches, lease; failure detector, elections)
 ├─ the log syncer (fsync of every replicated topic's log, every --sync-timeout)
 └─ short tasks: a sync of a member into the primary's epoch
```
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from ...protocol.errors import E_IDENTIFY_FAILED, ProtocolError
from ...protocol.names import is_ephemeral
from ..backend import Backend
from . import admin, roles, wire
from .admin_state import Tombstones
from .batching import FlushWhenIdle
from .forward import Send, answer_forwarded
from .log import fsync_handles
from .peer import Peer, serve_inbound
from .topic import ReplicatedTopic, TopicReplica
from .trace import open_trace

if TYPE_CHECKING:
    from ..client_v2 import ClientV2
    from ..nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")

#: How often waiting publishers are checked against --replication-ack-timeout.
EXPIRY_TICK = 0.05


class Replication:
    """The replica set's machinery on this node."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        options = nsqd.options
        self.data_path = options.data_path or os.getcwd()
        self.patterns = [re.compile(p) for p in options.replicate_topic]
        self.peers = [Peer(self, address) for address in dict.fromkeys(options.replicate_to)]
        #: Quorum of the replica set (this node and its peers).
        self.quorum = roles.quorum_size(len(self.peers) + 1)
        #: Epochs nsqd.dat holds, until their topics are created at load.
        self.saved_epochs: dict[str, int] = {}
        #: Replicated topics deleted, and the epoch below which a copy is of the deleted one.
        self.tombstones = Tombstones(self.data_path)
        #: Topics created because a peer named them (replicated whatever the patterns say).
        self._remote: set[str] = set()
        self.loading = False
        self._nursery: trio.Nursery | None = None
        #: Writes and streams the topics' accepted publishes between two passes of the loop.
        self.batching = FlushWhenIdle()
        self._tls_context: ssl.SSLContext | None = None
        self._inbound: dict[int, wire.Inbound] = {}  # client id -> the dialler, until PROOF
        #: --replication-trace-file: this member's steps, for `python -m spec trace`.
        self.trace = open_trace(options, len(self.peers) + 1)

    # -- which topics -----------------------------------------------------------------------

    def replicates(self, name: str) -> bool:
        if is_ephemeral(name):
            return False
        return name in self._remote or any(p.fullmatch(name) for p in self.patterns)

    def new_topic(self, name: str, backend: Backend) -> ReplicatedTopic:
        """The topic (its tasks, `ReplicatedTopic.tasks`, run under nsqd's root nursery)."""
        topic = ReplicatedTopic(self.nsqd, name, backend, self)
        self.nsqd.lookup.hidden.add(name)
        return topic

    def load_started(self, epochs: dict[str, int]) -> None:
        """nsqd.dat is being loaded: its epochs, until their topics are created."""
        self.saved_epochs.update(epochs)
        self.loading = True

    def load_finished(self) -> None:
        self.loading = False

    def loading_or_remote(self, name: str) -> bool:
        return self.loading or name in self._remote

    def forget(self, name: str) -> None:
        """The topic is being deleted."""
        self._remote.discard(name)

    def delete_stale(self, name: str, floor: int, why: str) -> bool:
        """Delete this member's copy of a topic if it is of an epoch below `floor` (of a
        topic deleted meanwhile); True if it did."""
        topic = self.nsqd.topics.get(name)
        if isinstance(topic, ReplicatedTopic) and topic.replica.epoch < floor:
            admin.delete_here(self, name, floor, why)
            return True
        return False

    def replica_of(self, name: str, create: bool) -> TopicReplica | None:
        topic = self.nsqd.topics.get(name)
        if topic is None and create and not self.nsqd.exiting:
            self._remote.add(name)
            topic = self.nsqd.get_topic(name)
        if isinstance(topic, ReplicatedTopic):
            return topic.replica
        return None

    def replicas(self) -> list[TopicReplica]:
        return [t.replica for t in self.nsqd.topics.values() if isinstance(t, ReplicatedTopic)]

    # -- peers ------------------------------------------------------------------------------

    def peer_by_id(self, node_id: int | None) -> Peer | None:
        for peer in self.peers:
            if peer.node_id == node_id and peer.connected:
                return peer
        return None

    def address_of(self, node_id: int | None) -> str | None:
        if node_id is None:
            return None
        if node_id == self.nsqd.options.node_id:
            host = self.nsqd.options.broadcast_address
            return f"{host}:{self.nsqd.broadcast_tcp_port}"
        for peer in self.peers:
            if peer.node_id == node_id:
                return peer.address
        return f"node {node_id}"

    def peer_connected(self, peer: Peer) -> None:
        pass  # the primaries' topic tasks sync it at their next tick

    def peer_disconnected(self, peer: Peer) -> None:
        for replica in self.replicas():
            if peer.node_id is not None:
                replica._drop_member(peer.node_id, "disconnected")

    def client_tls_context(self) -> ssl.SSLContext | None:
        """How this node dials its peers over TLS: None without --tls-cert and --tls-key;
        else the peers' certificates are verified against --tls-root-ca-file (the system's
        CAs without it) and this node's own certificate is presented (for a peer with
        --tls-client-auth-policy)."""
        options = self.nsqd.options
        if not (options.tls_cert and options.tls_key):
            return None
        if self._tls_context is None:
            context = ssl.create_default_context(cafile=options.tls_root_ca_file or None)
            context.load_cert_chain(options.tls_cert, options.tls_key)
            self._tls_context = context
        return self._tls_context

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> bool:
        """Start a task under the layer's nursery; False before it runs (or once it ended)."""
        if self._nursery is None:
            return False
        self._nursery.start_soon(fn, *args)
        return True

    # -- running ----------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        trio.lowlevel.add_instrument(self.batching)
        try:
            await self._run(task_status)
        finally:
            trio.lowlevel.remove_instrument(self.batching)
            if self.trace is not None:
                self.trace.close()

    async def _run(self, task_status: Any) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for peer in self.peers:
                nursery.start_soon(peer.run, name=f"replication-peer:{peer.address}")
            nursery.start_soon(self._sync_loop, name="replication-log-sync")
            nursery.start_soon(self._expire_loop, name="replication-ack-timeouts")
            if self.trace is not None:
                nursery.start_soon(self.trace.run, name="replication-trace")
            for replica in self.replicas():
                # nsqd.dat named a topic deleted before it stopped (its delete cut short).
                try:
                    self.delete_stale(replica.name, replica.floor, "deleted before a restart")
                except OSError as err:
                    log.error("REPLICATION(%s): failed to delete - %s", replica.name, err)
            task_status.started()
            await trio.sleep_forever()

    async def _sync_loop(self) -> None:
        """fsync the logs (what --sync-timeout does for the disk queues)."""
        while True:
            await trio.sleep(self.nsqd.options.sync_timeout)
            for replica in self.replicas():
                try:
                    await self.nsqd.run_blocking(fsync_handles, replica.log.sync_handles())
                except OSError as err:
                    log.error("REPLICATION(%s): fsync failed - %s", replica.name, err)

    async def _expire_loop(self) -> None:
        """--replication-ack-timeout: fail the publishers that waited longer."""
        while True:
            await trio.sleep(EXPIRY_TICK)
            now = trio.current_time()
            for replica in self.replicas():
                replica.waiters.expire(now)
                replica.forwarder.expire(now)

    async def fsync_logs(self, topics: Iterable[str]) -> None:
        """--sync-ack on a member: fsync the logs of `topics` before acknowledging what was
        written to them (raises OSError)."""
        handles = []
        for name in topics:
            replica = self.replica_of(name, create=False)
            if replica is not None:
                handles.append(replica.log.dup_handle())
        if handles:
            await self.nsqd.run_blocking(fsync_handles, handles)

    async def persist(self, topic: str) -> None:
        """Write nsqd.dat with the topic's epoch before going on (a promise is kept across
        a crash)."""
        self.nsqd.persist_metadata(topic)
        await self.nsqd.metadata.flush()

    def persist_soon(self, topic: str) -> None:
        self.nsqd.persist_metadata(topic)

    # -- the wire ---------------------------------------------------------------------------

    def identify_reply(
        self, client: ClientV2, raw: Any, reply: bytes, tls_requested: bool
    ) -> bytes:
        """IDENTIFY with a ``replication`` key: check it and answer with ours. Raises
        ProtocolError (E_IDENTIFY_FAILED) when the member is refused."""
        import json

        options = self.nsqd.options
        try:
            inbound, key = wire.check_identify_key(options.replication_secret, options.node_id, raw)
            if self.nsqd.tls_context is not None and not tls_requested:
                # With TLS configured, members talk only over TLS (no downgrade to plaintext).
                raise wire.WireError("replication requires TLS (this nsqd has --tls-cert)")
        except wire.WireError as err:
            raise ProtocolError(E_IDENTIFY_FAILED, f"IDENTIFY failed {err}") from None
        self._inbound[client.id] = inbound
        body = json.loads(reply) if reply.startswith(b"{") else {}
        body["replication"] = key
        return json.dumps(body).encode()

    async def serve(self, client: ClientV2) -> None:
        """The peer's connection: no longer a client (no heartbeats, not in /stats)."""
        inbound = self._inbound.pop(client.id)
        self.nsqd.heartbeats.remove(client)
        self.nsqd.remove_client(client)
        await client.drain()
        await serve_inbound(self, client, inbound)

    async def handle_request(
        self, sender: int, kind: int, header: dict[str, Any], blob: bytes
    ) -> list[bytes]:
        name = header.get("topic")
        if not isinstance(name, str):
            raise wire.WireError("request without a topic")
        if kind == wire.BARRIER:
            return await admin.on_barrier(self, header)
        if kind != wire.MSGS:
            # A topic deleted in a later epoch than the sender's copy, or a copy here of a
            # topic deleted before the sender's was created (docs/replication.md, 13).
            floor = header.get("floor")
            if isinstance(floor, int):
                self.delete_stale(name, floor, f"node {sender} leads it since")
            epoch = header.get("epoch")
            deleted = self.tombstones.floor(name)
            if name not in self.nsqd.topics and isinstance(epoch, int) and epoch < deleted:
                answer = {"topic": name, "floor": deleted, "rid": header.get("rid")}
                return [wire.encode(wire.DELETED, answer)]
        creates = kind in (
            wire.PREVOTE,
            wire.PREPARE,
            wire.SYNC,
            wire.HEARTBEAT,
            wire.MSGS,
            wire.ASK_SUMMARY,
        )
        replica = self.replica_of(name, create=creates)
        if replica is None:
            return []
        if kind == wire.TOPIC:
            return admin.on_topic(self, replica, sender, header, blob)
        if kind == wire.CHANNEL and header.get("op") in admin.CHANNEL_OPS:
            return admin.on_channel_op(replica, sender, header, blob)
        if kind == wire.MSGS:
            return replica.on_msgs(sender, header, blob)
        if kind == wire.HEARTBEAT:
            return await replica.on_heartbeat(sender, header)
        if kind == wire.FINS:
            return replica.on_fins(sender, header, blob)
        if kind == wire.CHANNEL:
            return replica.on_channel(sender, header)
        if kind == wire.PREVOTE:
            return replica.on_prevote(sender, header)
        if kind == wire.PREPARE:
            return await replica.on_prepare(sender, header)
        if kind == wire.SYNC:
            return await replica.on_sync(sender, header)
        if kind == wire.WANT:
            return await replica.on_want(header, blob)
        if kind == wire.ASK_DROPPED:
            return await replica.on_ask_dropped(header, blob)
        if kind == wire.ASK_SUMMARY:
            return await replica.on_ask_summary(header)
        raise wire.WireError(f"unexpected request {wire.NAMES.get(kind, kind)}")

    async def answer_forward(
        self, sender: int, header: dict[str, Any], send: Callable[[bytes], Awaitable[None]]
    ) -> None:
        """A replica forwarded an HTTP admin action (FORWARD): answer it when it is done,
        while the connection serves the peer's other requests."""
        reply = await admin.answer_forwarded(self, sender, header)
        try:
            await send(reply)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    def deleted_by_peer(self, peer: Peer, header: dict[str, Any]) -> None:
        """A DELETED answer: the peer deleted the topic after this node's copy's epoch."""
        name, floor = header.get("topic"), header.get("floor")
        if isinstance(name, str) and isinstance(floor, int):
            self.delete_stale(name, floor, f"node {peer.node_id} deleted it")

    def forwarded(
        self, sender: int, header: dict[str, Any], blob: bytes, send: Send
    ) -> list[bytes]:
        """A replica's PUB_FORWARD (forward.py): published here, answered with
        `send` once a quorum has the messages."""
        return answer_forwarded(self, header, blob, send)

    def handle_answer(self, peer: Peer, kind: int, header: dict[str, Any], blob: bytes) -> None:
        name = header.get("topic")
        replica = self.replica_of(name, create=False) if isinstance(name, str) else None
        if replica is None or peer.node_id is None:
            return
        if kind == wire.ACK:
            replica.acknowledged(peer.node_id, int(header["epoch"]), int(header["total"]))
        elif kind == wire.HEARTBEAT_ACK:
            replica.heartbeat_acked(peer.node_id, int(header["epoch"]), float(header["sent"]))
        elif kind == wire.REFUSE:
            replica.refused(int(header.get("epoch", 0)), f"node {peer.node_id} refused")
