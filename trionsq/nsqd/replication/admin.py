"""HTTP admin actions on a replicated topic (docs/replication.md sections 5, 6 and 8).

On the primary an action does what Go nsqd does, then sends it to the members in order with
the stream (CHANNEL and TOPIC frames) and answers once a quorum has applied it and has it on
disk (a BARRIER request, answered by a member once every frame before it is applied): a
paused channel or topic stays paused, an emptied one stays empty (its messages become
finished IDs), a deleted one stays deleted (its files go on every member) after a failover.
On a replica the action is forwarded to the primary over the replication connection
(FORWARD) and answered with the primary's answer; with no primary known, 503 NO_PRIMARY.

Also here: what a member does with those frames, and ``POST /topic/takeover`` (section 8).
Go's answers: status 200 with no body, or ``{"message": CODE}``; beyond Go, 503
``NO_PRIMARY`` and 503 ``REPLICATION_TIMEOUT`` (done on the primary, not acknowledged by a
quorum within --replication-ack-timeout).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ...diskqueue import DiskQueue
from ...protocol.message import framed_id
from ...protocol.names import is_valid_channel_name
from . import wire
from .admin_state import Version, parse_version
from .log import fsync_handles, split_ids
from .roles import NODE_BITS, PRIMARY, REPLICA
from .topic import ReplicatedTopic, TopicReplica

if TYPE_CHECKING:
    from ..channel import Channel
    from ..topic import Topic
    from .node import Replication

log = logging.getLogger("trionsq.nsqd")

Answer = tuple[int, str | None]
OK: Answer = (200, None)

TOPIC_ACTIONS = frozenset({"topic_pause", "topic_unpause", "topic_empty", "topic_delete"})
CHANNEL_ACTIONS = frozenset(
    {"channel_create", "channel_pause", "channel_unpause", "channel_empty", "channel_delete"}
)
#: CHANNEL frame operations this module applies on a member (the others: `on_channel`).
CHANNEL_OPS = frozenset({"pause", "unpause", "empty"})
#: Actions Go answers after writing nsqd.dat.
_PERSISTED = frozenset(TOPIC_ACTIONS | CHANNEL_ACTIONS) - {"topic_empty", "channel_empty"}


async def act(topic: ReplicatedTopic, action: str, channel: str | None = None) -> Answer:
    """An admin action on a replicated topic, on whichever member it reached: done here as
    the primary, forwarded to the primary from a replica."""
    replica = topic.replica
    if replica.role == PRIMARY:
        return await perform(replica, action, channel)
    return await forward(replica, action, channel)


# -- on the primary -----------------------------------------------------------------------------


async def perform(
    replica: TopicReplica, action: str, channel: str | None, forwarder: int | None = None
) -> Answer:
    """Do the action as the primary, send it to the members, and answer once a quorum has
    it (and the member that forwarded it, if it is one)."""
    repl = replica.repl
    nsqd = repl.nsqd
    topic = replica.topic
    # Everything accepted before the action reaches the members before it.
    replica.flush()
    replica.flush_fins()
    epoch = replica.epoch
    members = list(replica.members)
    need = replica.quorum - 1
    if nsqd.options.replication_degraded == "accept":
        need = min(need, len(members))
    try:
        refused = _apply(replica, topic, action, channel)
    except OSError as err:  # the admin file, the emptied set, a FIN file
        log.error("REPLICATION(%s): %s failed - %s", replica.name, action, err)
        return 500, "INTERNAL_ERROR"
    if refused is not None:
        return refused
    if action in _PERSISTED and not await nsqd.metadata.flush():
        return 500, "INTERNAL_ERROR"
    timeout = nsqd.options.replication_ack_timeout
    if not await barrier(repl, replica.name, epoch, members, need, forwarder, timeout):
        log.warning(
            "REPLICATION(%s): %s done here, not acknowledged by a quorum", replica.name, action
        )
        return 503, "REPLICATION_TIMEOUT"
    return OK


def _apply(
    replica: TopicReplica, topic: ReplicatedTopic, action: str, channel: str | None
) -> Answer | None:
    """Do the action here and send it to the members; an answer if it is refused."""
    if action in CHANNEL_ACTIONS:
        assert channel is not None
        if action == "channel_create":
            topic.get_channel(channel)
            return None
        found = topic.channels.get(channel)
        if found is None:
            return 404, "CHANNEL_NOT_FOUND"
        if action == "channel_delete":
            topic.delete_channel(channel)
        elif action == "channel_empty":
            _empty_channel(replica, found)
        else:
            _pause_channel(replica, found, action == "channel_pause")
    elif action == "topic_delete":
        _delete_topic(replica)
    elif action == "topic_empty":
        _empty_topic(replica)
    else:
        _pause_topic(replica, action == "topic_pause")
    return None


def _versioned(replica: TopicReplica) -> Version:
    return replica.admin.next_version(replica.epoch)


def _pause_channel(replica: TopicReplica, channel: Channel, paused: bool) -> None:
    version = _versioned(replica)
    replica.admin.set_channel(channel.name, version, exists=True, paused=paused)
    replica.admin.save()
    if paused:
        channel.pause()
    else:
        channel.unpause()
    op = "pause" if paused else "unpause"
    replica._send_members(wire.CHANNEL, {"op": op, "channel": channel.name, "v": list(version)})


def _pause_topic(replica: TopicReplica, paused: bool) -> None:
    version = _versioned(replica)
    replica.admin.set_topic(paused, version)
    replica.admin.save()
    if paused:
        replica.topic.pause()
    else:
        replica.topic.unpause()
    op = "pause" if paused else "unpause"
    replica._send_members(wire.TOPIC, {"op": op, "v": list(version)})


def _queued_in_topic(topic: Topic, skip: int, deferred: bool) -> set[bytes]:
    """The IDs waiting in the topic's own queue (memory, then its disk queue from its
    `skip`-th record on; its DPUB messages if `deferred`). Reads the disk queue in the event
    loop: the answer must hold at the moment it is used."""
    ids = {framed_id(frame) for frame in topic.memory}
    if deferred:
        ids.update(framed_id(frame) for frame, _ in topic.deferred)
    backend = topic.backend
    if isinstance(backend, DiskQueue) and backend.depth:
        frames = backend.peek().read(backend.depth, 1 << 62)
        ids.update(framed_id(frame) for frame in frames[skip:])
    return ids


def _empty_channel(replica: TopicReplica, channel: Channel) -> None:
    """Go's channel empty; then every message of the log the channel will not get is
    finished for it (what the topic still holds for it is not)."""
    channel.empty()
    if channel.ephemeral:
        return
    pending = _queued_in_topic(replica.topic, channel.backlog_skip, deferred=True)
    done = replica.log.finished.get(channel.name, set())
    ids = [i for i in replica.log.ids() if i not in pending and i not in done]
    replica.log.finish(channel.name, ids)
    replica.log.write_fins()
    replica._send_members(
        wire.CHANNEL, {"op": "empty", "channel": channel.name, "count": len(ids)}, b"".join(ids)
    )


def _empty_topic(replica: TopicReplica) -> None:
    """Go's topic empty (its queue; channels keep theirs): what it dropped is finished for
    every channel, and for those created later."""
    ids = list(_queued_in_topic(replica.topic, 0, deferred=False))
    replica.topic.empty()
    replica.log.empty_topic(ids)
    replica._send_members(wire.TOPIC, {"op": "empty", "count": len(ids)}, b"".join(ids))


def _delete_topic(replica: TopicReplica) -> None:
    """Go's topic delete, here and on every member; a copy of it in this epoch or below
    that comes back is deleted too (`Tombstones`)."""
    floor = (replica.epoch // NODE_BITS + 2) * NODE_BITS
    replica._send_members(wire.TOPIC, {"op": "delete", "floor": floor})
    delete_here(replica.repl, replica.name, floor, "deleted over HTTP")


def delete_here(repl: Replication, name: str, floor: int, why: str) -> None:
    """Delete a replicated topic on this member (files included) and remember it."""
    repl.tombstones.add(name, floor)
    if name in repl.nsqd.topics:
        log.info("REPLICATION(%s): deleting the topic (%s)", name, why)
        repl.forget(name)
        repl.nsqd.delete_topic(name)


async def barrier(
    repl: Replication,
    name: str,
    epoch: int,
    members: list[int],
    need: int,
    forwarder: int | None,
    timeout: float,
) -> bool:
    """Wait until `need` of `members` have applied, and have on disk, every frame sent them
    before (and `forwarder`, if it is a member, within the same time); False if too few did
    within `timeout`."""
    acked: set[int] = set()
    finished = 0
    changed = trio.Event()

    def quorum() -> bool:
        return len(acked) >= need

    async def ask(node_id: int) -> None:
        nonlocal finished, changed
        peer = repl.peer_by_id(node_id)
        if peer is not None:
            answer = await peer.ask(wire.BARRIER, {"topic": name, "epoch": epoch}, timeout=timeout)
            if answer is not None and answer[0] == wire.BARRIER_ACK and answer[1].get("ok"):
                acked.add(node_id)
        finished += 1
        changed.set()
        changed = trio.Event()

    if not members:
        return quorum()
    async with trio.open_nursery() as nursery:
        for node_id in members:
            nursery.start_soon(ask, node_id)
        with trio.move_on_after(timeout):
            while finished < len(members):
                waiting_for_forwarder = forwarder in members and forwarder not in acked
                if quorum() and not waiting_for_forwarder:
                    break
                await changed.wait()
        nursery.cancel_scope.cancel()
    return quorum()


# -- on a replica ---------------------------------------------------------------------------


async def forward(replica: TopicReplica, action: str, channel: str | None) -> Answer:
    """Send the action to the primary and return its answer."""
    repl = replica.repl
    primary = replica.primary
    peer = repl.peer_by_id(primary) if primary != replica.node_id else None
    if peer is None or replica.role != REPLICA:
        return 503, "NO_PRIMARY"
    header: dict[str, Any] = {"topic": replica.name, "action": action}
    if channel is not None:
        header["channel"] = channel
    # The primary answers within its ack timeout (and a metadata write).
    timeout = repl.nsqd.options.replication_ack_timeout + 5.0
    answer = await peer.ask(wire.FORWARD, header, timeout=timeout)
    if answer is None:
        return 503, "NO_PRIMARY"
    kind, reply, _ = answer
    status = reply.get("status")
    message = reply.get("message")
    if kind != wire.FORWARD_REPLY or not isinstance(status, int) or not 200 <= status < 600:
        return 503, "NO_PRIMARY"
    return status, message if isinstance(message, str) else None


async def answer_forwarded(repl: Replication, sender: int, header: dict[str, Any]) -> bytes:
    """The primary's side of FORWARD: the FORWARD_REPLY frame."""
    name = header.get("topic")
    action = header.get("action")
    channel = header.get("channel")
    status: int = 503
    message: str | None = "NO_PRIMARY"
    topic = repl.nsqd.topics.get(name) if isinstance(name, str) else None
    if action not in TOPIC_ACTIONS | CHANNEL_ACTIONS:
        status, message = 400, "INVALID_REQUEST"
    elif action in CHANNEL_ACTIONS and (
        not isinstance(channel, str) or not is_valid_channel_name(channel)
    ):
        status, message = 400, "INVALID_ARG_CHANNEL"
    elif topic is None:
        status, message = 404, "TOPIC_NOT_FOUND"
    elif isinstance(topic, ReplicatedTopic) and topic.replica.role == PRIMARY:
        # Never forwarded again: a node that is no longer the primary answers NO_PRIMARY.
        chan = channel if action in CHANNEL_ACTIONS else None
        status, message = await perform(topic.replica, str(action), chan, forwarder=sender)
    reply: dict[str, Any] = {"topic": name, "rid": header.get("rid"), "status": status}
    if message is not None:
        reply["message"] = message
    return wire.encode(wire.FORWARD_REPLY, reply)


# -- on a member: the frames ------------------------------------------------------------------


def _ids(blob: bytes, count: Any) -> list[bytes]:
    if not isinstance(count, int) or count * 16 != len(blob):
        raise wire.WireError("bad ID list")
    return split_ids(blob)


def _in_epoch(replica: TopicReplica, header: dict[str, Any]) -> list[bytes] | None:
    """None if the frame is of this member's epoch (as a replica), else the answer."""
    epoch = int(header["epoch"])
    if epoch != replica.epoch or replica.role != REPLICA:
        return [replica.refuse()] if epoch < replica.epoch else []
    return None


def on_channel_op(
    replica: TopicReplica, sender: int, header: dict[str, Any], blob: bytes
) -> list[bytes]:
    """CHANNEL pause, unpause or empty from the primary."""
    refused = _in_epoch(replica, header)
    if refused is not None:
        return refused
    name = str(header.get("channel", ""))
    op = header.get("op")
    admin = replica.admin
    if admin.deleted(name):
        replica.heard(sender)
        return []
    topic = replica.topic
    if op == "empty":
        ids = _ids(blob, header.get("count"))
        replica.log.finish(name, ids)
        replica.log.write_fins()
    else:
        version = parse_version(header.get("v"))
        if version is None:
            raise wire.WireError("channel pause without a version")
        paused = op == "pause"
        if admin.set_channel(name, version, exists=True, paused=paused):
            admin.save()
            channel = topic.get_channel(name)
            if paused:
                channel.pause()
            else:
                channel.unpause()
    replica.heard(sender)
    return []


def on_topic(
    repl: Replication, replica: TopicReplica, sender: int, header: dict[str, Any], blob: bytes
) -> list[bytes]:
    """TOPIC pause, unpause, empty, delete or state (a joining member's) from the primary."""
    refused = _in_epoch(replica, header)
    if refused is not None:
        return refused
    op = header.get("op")
    if op == "delete":
        floor = header.get("floor")
        if not isinstance(floor, int) or floor <= replica.epoch:
            raise wire.WireError("topic delete without a floor above its epoch")
        delete_here(repl, replica.name, floor, f"deleted by the primary, node {sender}")
        return []
    if op in ("pause", "unpause"):
        version = parse_version(header.get("v"))
        if version is None:
            raise wire.WireError("topic pause without a version")
        if replica.admin.set_topic(op == "pause", version):
            replica.admin.save()
            if op == "pause":
                replica.topic.pause()
            else:
                replica.topic.unpause()
    elif op == "empty":
        replica.log.empty_topic(_ids(blob, header.get("count")))
    elif op == "state":
        replica.merge_admin(header.get("admin"), _ids(blob, header.get("count")))
    replica.heard(sender)
    return []


async def on_barrier(repl: Replication, header: dict[str, Any]) -> list[bytes]:
    """Answer once every frame before it is applied (they were, in order) and on disk."""
    name = header.get("topic")
    epoch = header.get("epoch")
    ok = False
    if isinstance(name, str) and isinstance(epoch, int):
        topic = repl.nsqd.topics.get(name)
        if topic is None:
            ok = repl.tombstones.floor(name) > epoch  # deleted by the frame before
        elif isinstance(topic, ReplicatedTopic):
            replica = topic.replica
            if replica.epoch == epoch and replica.role == REPLICA:
                nsqd = repl.nsqd
                try:
                    await nsqd.run_blocking(fsync_handles, replica.log.sync_handles())
                    ok = await nsqd.metadata.flush()
                except OSError as err:
                    log.error("REPLICATION(%s): fsync failed - %s", name, err)
    return [wire.encode(wire.BARRIER_ACK, {"topic": name, "rid": header.get("rid"), "ok": ok})]


# -- POST /topic/takeover ---------------------------------------------------------------------


async def take_over(topic: ReplicatedTopic) -> Answer:
    """Section 8's manual takeover: in a two-member set whose other member is gone, this
    member stands with its vote counted twice and serves alone until the other joins."""
    replica = topic.replica
    repl = replica.repl
    if replica.role == PRIMARY:
        return 400, "ALREADY_PRIMARY"
    if len(repl.peers) != 1:
        return 400, "TAKEOVER_NEEDS_TWO_MEMBERS"
    if repl.peers[0].connected:
        return 409, "PEER_CONNECTED"
    if replica.role != REPLICA:
        return 409, "ELECTION_UNDER_WAY"
    log.warning(
        "REPLICATION(%s): manual takeover: standing alone, this node's vote counted twice",
        replica.name,
    )
    if not await replica.stand_alone():
        return 409, "TAKEOVER_FAILED"
    return OK
