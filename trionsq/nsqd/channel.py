"""A channel: its memory queue and backend, its subscribers, the messages in flight to them,
and its deferred messages (REQ with a delay, DPUB).

Messages are framed `bytes` (trionsq.protocol.message). `dispatch` hands queued messages to
ready subscribers in batches, splitting what is available evenly among them; it runs
synchronously in whichever task made messages or room available. In-flight messages are held
by each client (client_v2.py); when a client goes away its in-flight table stays with the
channel as an orphan until those messages finish, time out, or are requeued (NSQ does not
requeue at disconnect).

A durable channel (--mem-queue-size=0, or --sync-ack) keeps its deferred messages in its disk
queue's deferred log as well as in memory: a REQ with a delay, or a DPUB reaching the channel,
is on disk before it counts as done, and a crash brings it back at its due time.

Beyond NSQ (opt-in, dead_letter.py): a channel with a `screen` (max attempts, TTL) does not
deliver a message past its attempts or its TTL: `_take` moves it to the dead-letter topic
through that topic's ordinary publish path, or drops it if it only expired. If the dead-letter
topic refuses it (exiting, disk error), it stays queued in the channel.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections import deque
from typing import TYPE_CHECKING

import trio

from ..diskqueue import frames_from_records
from ..protocol.message import framed_id, with_attempts
from . import bounds
from .backend import (
    READ_RETRY_INTERVAL,
    Backend,
    BackendError,
    from_wall_ns,
    queue_with_overflow,
    restore_deferred,
    save_at_exit,
    to_wall_ns,
)
from .client_v2 import ClientV2, InFlight
from .dead_letter import Limits, Screen, screen_for
from .e2e_latency import FinRecorder
from .e2e_latency import for_options as e2e_latency_for_options

if TYPE_CHECKING:
    from .topic import Topic

log = logging.getLogger("trionsq.nsqd")

ERR_NOT_IN_FLIGHT = "ID not in flight"
ERR_NOT_OWNER = "client does not own message"

_deferred_seq = itertools.count()

#: Frames a screened `Channel._take` looks at per call at most (dead_letter.py).
SCREEN_BATCH = 10_000


class ChannelError(Exception):
    """A FIN/REQ/TOUCH that nsqd refuses (non-fatal for the connection)."""


class Channel:
    __slots__ = (
        "backend",
        "backlog_skip",
        "clients",
        "dead_letter_count",
        "deferred",
        "delivery_limits",
        "dropped_count",
        "durable",
        "e2e",
        "ephemeral",
        "exiting",
        "expired_count",
        "limit_override",
        "limits",
        "mem_limit",
        "memory",
        "message_count",
        "name",
        "nsqd",
        "orphans",
        "paused",
        "read_retry_at",
        "refill_below",
        "rejected_count",
        "requeue_count",
        "rescreen",
        "screen",
        "timeout_count",
        "topic",
    )

    def __init__(self, topic: Topic, name: str, backend: Backend, ephemeral: bool) -> None:
        self.topic = topic
        self.nsqd = topic.nsqd
        self.name = name
        self.ephemeral = ephemeral
        self.backend = backend
        self.mem_limit = self.nsqd.mem_limit(ephemeral)
        #: Every message on disk before it counts as accepted (deferred ones included).
        self.durable = self.mem_limit == 0 and not ephemeral
        self.memory: deque[bytes] = deque()
        #: Records at the head of the topic's disk backlog this channel does not get (it was
        #: created or emptied after they were written: `Topic.owed_backlog`).
        self.backlog_skip = 0
        #: While the topic paces its disk backlog by this channel's consumption: the queue
        #: length below which `_take` wakes the topic's pump (0: not paced).
        self.refill_below = 0
        self.clients: list[ClientV2] = []
        self.orphans: list[dict[bytes, InFlight]] = []
        # Heap of (due, seq, frame) with the frame's attempts as they are to be delivered.
        self.deferred: list[tuple[float, int, bytes]] = []
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        # Bounded queues (bounds.py): the channel's own settings and the limits in force.
        self.limit_override: bounds.LimitOverride | None = None
        self.limits = bounds.effective(self.nsqd.options, None)
        self.dropped_count = 0
        self.rejected_count = 0
        # None unless --e2e-processing-latency-percentile is set: FIN then only tests for None.
        self.e2e: FinRecorder | None = e2e_latency_for_options(self.nsqd.options)
        # Dead-lettering and TTL (dead_letter.py): this channel's own settings, and the limits
        # that apply to it (None unless one does: delivery then only tests for None).
        self.delivery_limits: Limits | None = None
        self.screen: Screen | None = screen_for(topic, self)
        self.dead_letter_count = 0
        self.expired_count = 0
        #: `_take` stopped screening at SCREEN_BATCH: the queue scan dispatches again.
        self.rescreen = False
        #: When to try the disk queue again after a read failed (the queue scan dispatches).
        self.read_retry_at = math.inf
        # Deferred messages the deferred log kept across a restart or crash.
        for due_ns, frame in backend.held_deferred.values():
            self._push_deferred(frame, from_wall_ns(due_ns))

    # -- queueing -------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return len(self.memory) + self.backend.depth

    @property
    def in_flight_count(self) -> int:
        return sum(len(c.in_flight) for c in self.clients) + sum(len(o) for o in self.orphans)

    def put(self, frame: bytes) -> None:
        """Queue a message back (requeue, timeout, due deferred). If the disk refuses it, it
        stays in memory: a message already accepted is never dropped."""
        if len(self.memory) < self.mem_limit:
            self.memory.append(frame)
            return
        try:
            self.backend.put(frame)
        except BackendError:
            self.memory.append(frame)

    def put_many(self, frames: list[bytes]) -> None:
        """Queue messages from the topic pump (counted in message_count)."""
        self.message_count += len(frames)
        if self.limits is not None:
            self._put_bounded(frames)
            return
        queue_with_overflow(self.memory, self.mem_limit, self.backend, frames, spill=True)

    def _put_bounded(self, frames: list[bytes]) -> None:
        """`put_many` with limits (bounds.py): in order, then drop-oldest if that is the
        policy (under ``reject`` the topic refused what did not fit before accepting it)."""
        bounds.queue_in_order(self, frames, spill=True)
        if self.limits is not None and self.limits.drop_oldest:
            bounds.trim(self)

    def set_limits(self, override: bounds.LimitOverride | None) -> None:
        """Replace the channel's own limit settings (None: the flags apply)."""
        self.limit_override = override or None
        self.limits = bounds.effective(self.nsqd.options, self.limit_override)
        self.topic.refresh_bounded()
        if self.limits is not None and self.limits.drop_oldest:
            bounds.trim(self)

    def take_memory(self, topic: Topic) -> None:
        """Queue every message of the topic's memory queue, which fits in this channel's
        (counted in message_count); the topic's is left empty."""
        count = len(topic.memory)
        self.message_count += count
        if self.memory:
            self.memory.extend(topic.memory)
            topic.memory.clear()
        else:
            self.memory, topic.memory = topic.memory, self.memory

    @property
    def memory_room(self) -> int:
        """How many more messages the memory queue takes (--mem-queue-size)."""
        return self.mem_limit - len(self.memory)

    @property
    def takes_records(self) -> bool:
        """Whether messages from the topic go straight to the backend (memory queue full, as
        always with --mem-queue-size=0), so they can be moved undecoded (`put_records`)."""
        return len(self.memory) >= self.mem_limit

    def put_records(self, pieces: list[bytes], count: int) -> None:
        """Queue messages moved undecoded from the topic's disk queue (counted in
        message_count); if the disk refuses them they are kept in memory."""
        self.message_count += count
        try:
            self.backend.put_records(pieces, count)
        except BackendError:
            self.memory.extend(frames_from_records(pieces))
        if self.limits is not None and self.limits.drop_oldest:
            bounds.trim(self)

    def defer(self, frame: bytes, delay: float) -> bool:
        """Hold a message for `delay` seconds (REQ with a delay); see `defer_many`."""
        return self.defer_many([(frame, trio.current_time() + delay)])

    def defer_many(self, entries: list[tuple[bytes, float]]) -> bool:
        """Hold messages until their due times (trio clock). A durable channel writes them to
        its deferred log first. True if no other copy need be kept for a crash: they are in
        the log (or the channel is ephemeral, and nothing of it survives one). If the disk
        refuses, they are held in memory only: an accepted message is never dropped."""
        in_log = self.ephemeral
        if self.durable:
            try:
                self.backend.hold_deferred([(frame, to_wall_ns(due)) for frame, due in entries])
                in_log = True
            except BackendError:
                pass
        for frame, due in entries:
            self._push_deferred(frame, due)
        return in_log

    def _push_deferred(self, frame: bytes, due: float) -> None:
        heapq.heappush(self.deferred, (due, next(_deferred_seq), frame))
        self.nsqd.scan_notify(due)

    def _requeue_due(self, frames: list[bytes]) -> None:
        """Deferred messages came due: back into the queue. A durable channel's go to its disk
        queue before they leave the deferred log."""
        if not self.durable:
            for frame in frames:
                self.put(frame)
            return
        try:
            self.backend.put_many(frames)
        except BackendError:
            self.memory.extend(frames)  # still in the deferred log: a crash keeps them
            return
        self.backend.drop_deferred([framed_id(frame) for frame in frames])

    def _take(self, count: int) -> list[bytes]:
        frames = self._take_queued(count)
        if self.screen is not None:
            frames = self._screened(self.screen, frames, count)
        if self.refill_below and len(self.memory) + self.backend.depth < self.refill_below:
            self.topic.wake.set()  # the topic's pump moves more of its backlog here
        return frames

    def _take_queued(self, count: int) -> list[bytes]:
        """Up to `count` queued messages, oldest first (`_take` without its screen)."""
        memory = self.memory
        backend = self.backend
        if count >= len(memory):
            frames = list(memory)
            memory.clear()
            while len(frames) < count:
                taken = backend.take(count - len(frames))
                if not taken:
                    if backend.read_error is not None:
                        self._retry_read_later()
                    break
                if backend.deferred_due:
                    taken = self._restore_deferred(taken)
                frames += taken
        else:
            popleft = memory.popleft
            frames = [popleft() for _ in range(count)]
        return frames

    def _retry_read_later(self) -> None:
        if self.read_retry_at == math.inf:
            self.read_retry_at = trio.current_time() + READ_RETRY_INTERVAL
            self.nsqd.scan_notify(self.read_retry_at)

    def _screened(self, screen: Screen, frames: list[bytes], count: int) -> list[bytes]:
        """The frames to deliver of those taken, topped up to `count` from the queue: the
        others are dead-lettered or dropped (dead_letter.py). At most SCREEN_BATCH frames
        are looked at per call, so that a long run of expired messages does not stall the
        event loop; the queue scan then dispatches again (`rescreen`)."""
        kept: list[bytes] = []
        refused: list[bytes] = []
        seen = 0
        while frames:
            seen += len(frames)
            deliver, dead, expired = screen.split(frames)
            kept += deliver
            if expired and not screen.dead_letter_topic:
                self.expired_count += len(expired)
                self._release_dropped(expired)
            elif dead or expired:
                kept_back = self._dead_letter(screen, dead + expired)
                if kept_back:
                    refused += kept_back
                else:
                    self.expired_count += len(expired)
            missing = count - len(kept)
            if missing <= 0 or not (self.memory or self.backend.depth):
                break
            if seen >= SCREEN_BATCH:
                if not refused:  # else the next dispatch goes on: no busy loop on a full disk
                    self.rescreen = True
                    self.nsqd.scan_notify(trio.current_time())
                break
            frames = self._take_queued(min(missing, SCREEN_BATCH))
        for frame in refused:
            self.put(frame)
        return kept

    def _dead_letter(self, screen: Screen, frames: list[bytes]) -> list[bytes]:
        """Move `frames` to the dead-letter topic as they are (ID, body, timestamp, attempts)
        by its ordinary publish path; return them if it refuses them (they stay here)."""
        from .topic import TopicExiting

        name = screen.dead_letter_topic
        assert name is not None
        nsqd = self.nsqd
        if nsqd.exiting:
            return frames  # shutdown saves them with the channel
        try:
            topic = nsqd.get_topic(name)
            pump_later: list[Topic] = []
            topic.put_frames(frames, pump_later=pump_later)
        except (TopicExiting, BackendError) as err:
            if not screen.refused:  # once, not at every dispatch while the disk is full
                screen.refused = True
                log.warning(
                    "CHANNEL(%s:%s): dead-letter topic %s refused messages - %s; they stay "
                    "queued here, not delivered, until it takes them",
                    self.topic.name,
                    self.name,
                    name,
                    err,
                )
            return frames
        if screen.refused:
            screen.refused = False
            log.info(
                "CHANNEL(%s:%s): dead-letter topic %s takes messages again",
                self.topic.name,
                self.name,
                name,
            )
        if pump_later:
            topic.wake.set()  # its pump moves them to its channels
        self.dead_letter_count += len(frames)
        self._release_dropped(frames)
        return []

    def _release_dropped(self, frames: list[bytes]) -> None:
        """Messages taken from the backend that leave the channel (dead-lettered or expired)
        need not come back after a crash any more, as a FIN'd one."""
        backend = self.backend
        if backend.owed:
            for frame in frames:
                backend.release(framed_id(frame))

    def _restore_deferred(self, frames: list[bytes]) -> list[bytes]:
        """Defer again the messages that were deferred when nsqd last stopped; return the
        others."""
        due_now, later = restore_deferred(self.backend, frames)
        if later:
            now = trio.current_time()
            entries = [(frame, now + delay) for frame, delay in later]
            if self.defer_many(entries) and self.backend.owed:
                for frame, _ in later:
                    self.backend.release(framed_id(frame))
        return due_now

    # -- delivery -------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand queued messages to subscribers with room in their RDY window."""
        if self.paused:
            return
        available = len(self.memory) + self.backend.depth
        if not available:
            return
        clients = self.clients
        if len(clients) == 1:
            client = clients[0]
            free = client.free_slots()
            if free > 0:
                frames = self._take(min(free, available))
                if frames:
                    self.nsqd.scan_notify(client.deliver(frames, trio.current_time()))
            return
        ready = [c for c in clients if c.free_slots() > 0]
        if not ready:
            return
        # Rotate so that the same subscriber is not always served first.
        if len(ready) > 1:
            clients.append(clients.pop(0))
        now = trio.current_time()
        deadline = math.inf
        remaining = len(ready)
        for client in ready:
            share = -(-available // remaining)  # ceil
            remaining -= 1
            count = min(client.free_slots(), share)
            if count <= 0:
                continue
            frames = self._take(count)
            if not frames:
                break
            available -= len(frames)
            deadline = min(deadline, client.deliver(frames, now))
            if not available:
                break
        self.nsqd.scan_notify(deadline)

    # -- FIN / REQ / TOUCH ----------------------------------------------------------------

    def _owner_error(self, message_id: bytes) -> ChannelError:
        for table in itertools.chain((c.in_flight for c in self.clients), self.orphans):
            if message_id in table:
                return ChannelError(ERR_NOT_OWNER)
        return ChannelError(ERR_NOT_IN_FLIGHT)

    def finish(self, client: ClientV2, message_id: bytes) -> None:
        entry = client.pop_in_flight(message_id)
        if entry is None:
            raise self._owner_error(message_id)
        client.finish_count += 1
        if self.backend.owed:
            self.backend.release(message_id)
        if self.e2e is not None:
            self.e2e.record_frame(entry[0])

    def requeue(self, client: ClientV2, message_id: bytes, delay: float) -> None:
        entry = client.pop_in_flight(message_id)
        if entry is None:
            raise self._owner_error(message_id)
        client.requeue_count += 1
        self.requeue_count += 1
        frame = _delivered(entry[0])
        if delay > 0:
            if self.defer(frame, delay) and self.backend.owed:
                # The deferred log's copy stands for the one in the queue from now on.
                self.backend.release(message_id)
        else:
            self.put(frame)
            self.dispatch()

    def touch(self, client: ClientV2, message_id: bytes) -> None:
        entry = client.pop_in_flight(message_id)
        if entry is None:
            raise self._owner_error(message_id)
        frame, _, delivered_at = entry
        now = trio.current_time()
        deadline = now + client.msg_timeout
        cap = delivered_at + self.nsqd.options.max_msg_timeout
        if deadline > cap:
            deadline = cap
            client.irregular.add(message_id)
            self.nsqd.scan_notify(deadline)
        client.in_flight[message_id] = (frame, deadline, delivered_at)

    # -- timeouts and deferred messages (queue scan) --------------------------------------

    def process_due(self, now: float) -> float:
        """Requeue timed-out in-flight messages and due deferred ones; return the channel's
        next deadline."""
        requeued = False
        for client in self.clients:
            if client.in_flight and client.earliest_deadline() <= now:
                requeued |= self._expire(client.in_flight, client.irregular, now)
        if self.orphans:
            for table in self.orphans:
                requeued |= self._expire(table, None, now)
            self.orphans = [t for t in self.orphans if t]
        deferred = self.deferred
        if deferred and deferred[0][0] <= now:
            due: list[bytes] = []
            while deferred and deferred[0][0] <= now:
                due.append(heapq.heappop(deferred)[2])
            self._requeue_due(due)
            requeued = True
        if self.read_retry_at <= now:
            self.read_retry_at = math.inf
            requeued = True
        if requeued or self.rescreen:
            self.rescreen = False
            self.dispatch()
        return self.next_deadline()

    def _expire(
        self, table: dict[bytes, InFlight], irregular: set[bytes] | None, now: float
    ) -> bool:
        expired: list[bytes] = []
        for message_id, entry in table.items():
            if entry[1] > now:
                break
            expired.append(message_id)
        if irregular:
            expired += [i for i in irregular if i in table and table[i][1] <= now]
        for message_id in expired:
            timed_out = table.pop(message_id, None)
            if timed_out is None:
                continue
            if irregular:
                irregular.discard(message_id)
            self.timeout_count += 1
            self.put(_delivered(timed_out[0]))
        return bool(expired)

    def next_deadline(self) -> float:
        earliest = self.deferred[0][0] if self.deferred else math.inf
        earliest = min(earliest, self.read_retry_at)
        for client in self.clients:
            if client.in_flight:
                earliest = min(earliest, client.earliest_deadline())
        for table in self.orphans:
            earliest = min(earliest, next(iter(table.values()))[1])
        return earliest

    # -- subscribers ----------------------------------------------------------------------

    def add_client(self, client: ClientV2) -> None:
        self.clients.append(client)

    def remove_client(self, client: ClientV2) -> None:
        """A subscriber went away: its in-flight messages stay until they time out."""
        if client in self.clients:
            self.clients.remove(client)
        if client.in_flight:
            table = dict(client.in_flight)
            if client.irregular:
                # Keep the scan's ordering assumption: re-sort by deadline.
                table = dict(sorted(table.items(), key=lambda kv: kv[1][1]))
            self.orphans.append(table)
            client.in_flight.clear()
            client.irregular.clear()
        if not self.clients and self.topic.backend.depth:
            self.topic.wake.set()  # its backlog is no longer paced by this channel's reads
        if self.ephemeral and not self.clients and not self.exiting:
            self.topic.delete_channel(self.name)

    # -- lifecycle ------------------------------------------------------------------------

    def set_delivery_limits(self, limits: Limits | None) -> None:
        """Its own dead-lettering and TTL settings (None or empty: none); nsqd.dat keeps them."""
        self.delivery_limits = None if limits is None or limits.is_empty() else limits
        self.refresh_screen()
        if not self.ephemeral:
            self.nsqd.persist_metadata(self.topic.name)

    def refresh_screen(self) -> None:
        """Its own or its topic's settings changed: the limits that apply now."""
        self.screen = screen_for(self.topic, self)

    def pause(self) -> None:
        """Deliver nothing: subscribers are treated as not ready; in-flight messages go on."""
        self.paused = True
        if not self.ephemeral:
            self.nsqd.persist_metadata(self.topic.name)

    def unpause(self) -> None:
        self.paused = False
        if not self.ephemeral:
            self.nsqd.persist_metadata(self.topic.name)
        self.dispatch()

    def empty(self) -> None:
        """Drop queued, in-flight and deferred messages (HTTP /channel/empty)."""
        for client in self.clients:
            client.in_flight.clear()
            client.irregular.clear()
        self.orphans.clear()
        self.deferred.clear()
        self.memory.clear()
        self.backend.empty()
        # What the topic's pump has not moved here yet goes too.
        self.backlog_skip = self.topic.owed_backlog()

    def close(self) -> int:
        """Shutdown: every queued, in-flight and deferred message goes to the backend; how
        many were lost (the disk refused them: `save_at_exit`)."""
        self.exiting = True
        log.info("CHANNEL(%s): closing", self.name)
        frames: list[bytes] = list(self.memory)
        in_memory = len(frames)
        self.memory.clear()
        for client in self.clients:
            frames += [_delivered(e[0]) for e in client.in_flight.values()]
            client.in_flight.clear()
        for table in self.orphans:
            frames += [_delivered(e[0]) for e in table.values()]
        self.orphans.clear()
        if frames or self.deferred:
            log.info(
                "CHANNEL(%s): flushing %d memory %d in-flight %d deferred messages to backend",
                self.name,
                in_memory,
                len(frames) - in_memory,
                len(self.deferred),
            )
        # Deferred messages go to the queue as Go writes them, their due times beside it
        # (the deferred log, if any, is removed once they are durable there).
        for due, _, frame in self.deferred:
            self.backend.deferred_due[framed_id(frame)] = to_wall_ns(due)
            frames.append(frame)
        self.deferred.clear()
        return save_at_exit(self.backend, frames, f"CHANNEL({self.name})")

    def delete(self) -> None:
        """HTTP /channel/delete or its topic's deletion: its subscribers' connections close."""
        self.exiting = True
        log.info("CHANNEL(%s): deleting", self.name)
        for client in self.clients:
            client.close_connection()
        self.empty()
        self.backend.delete()


def _delivered(frame: bytes) -> bytes:
    """The queued frame with the attempts it was delivered with (attempts + 1)."""
    return with_attempts(frame, (frame[16] << 8 | frame[17]) + 1)
