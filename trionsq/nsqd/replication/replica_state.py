"""What one topic's replica knows on this node: its role and epoch, its log, the members of its
epoch, the publishes waiting for a quorum, its FINs to send and its counters (`ReplicaState`,
the base of `TopicReplica`, whose concerns are the classes built on it: stream.py,
fin_batches.py, admin_sync.py, merging.py, election.py, joining.py, handlers.py).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

import trio

from ..wakeup import Wakeup
from . import forward, roles
from .acks import AckQueue
from .admin_state import AdminState
from .catchup import CatchUp
from .log import ReplicationLog
from .roles import epoch_text

if TYPE_CHECKING:
    from .node import Replication
    from .topic import ReplicatedTopic

log = logging.getLogger("trionsq.nsqd")


class Member:
    """A replica of the primary's epoch: what it has acknowledged, what is sent and not."""

    __slots__ = ("acked", "catch_up", "hb_acked", "joined_at", "unacked", "unacked_bytes")

    def __init__(self, acked: int) -> None:
        self.acked = acked
        #: Send time (trio clock) of the latest heartbeat it acknowledged.
        self.hb_acked = -1e18
        self.unacked: deque[tuple[int, int]] = deque()
        self.unacked_bytes = 0
        #: Its catch-up's frames not yet acknowledged when it joined the stream (their bytes
        #: are in `unacked_bytes`), and the stream position it joined at: it holds every
        #: message up to there once they are.
        self.catch_up: CatchUp | None = None
        self.joined_at = 0


class ReplicaState:
    """The state every concern of `TopicReplica` shares (each attribute's comment says what it
    holds), and the sizes of the replica set."""

    #: Publishes accepted here while another node leads, forwarded to it (made by
    #: `TopicReplica`: the forwarder needs the publishing concerns).
    forwarder: forward.Forwarder
    #: The quorum this node counts against (`roles.counted_quorum`), set with `doubled`.
    quorum: int

    def __init__(self, repl: Replication, topic: ReplicatedTopic) -> None:
        self.repl = repl
        self.topic = topic
        self.name = topic.name
        nsqd = repl.nsqd
        self.node_id = nsqd.options.node_id
        self.log = ReplicationLog(repl.data_path, topic.name)
        #: Paused states and deleted channels, versioned (admin_state.py).
        self.admin = AdminState(repl.data_path, topic.name)
        self.role = roles.INITIAL_ROLE
        #: The lowest epoch of this topic: a topic of this name was deleted below it. A copy
        #: nsqd.dat holds in a lower epoch is of the deleted topic (deleted at start).
        self.floor = repl.tombstones.floor(topic.name)
        saved = repl.saved_epochs.pop(topic.name, None)
        self.epoch = max(saved, 0) if saved is not None else self.floor
        self.doubled = False
        self.primary: int | None = None
        #: The primary a candidate stopped hearing from (`_poll` does not wait for it).
        self.primary_before: int | None = None
        #: The members whose state a damaged log was repaired from so far (`_repair`).
        self.repaired_from: set[int] = set()
        now = trio.current_time()
        #: When the primary was last heard from (-inf: stand at once, a topic just created
        #: here by a publisher or consumer).
        self.last_heard = now if repl.loading_or_remote(topic.name) else -1e18
        #: A replica stands no earlier than this (after a failed attempt: a short random
        #: pause). Apart from `last_heard`, which votes read: a failed candidate must not
        #: look to the others as if it had heard from the primary.
        self.stand_after = 0.0
        self.lookup_done = True
        self.accepted = 0
        #: Accepted, not yet in the log (`flush`).
        self.outbox: list[tuple[int, list[bytes]]] = []  # (due time, frames)
        self.outbox_count = 0
        #: --sync-ack: messages accepted whose log records this node has fsynced, and the
        #: wake-up of the task that fsyncs (`sync_task`).
        self.sync_ack = nsqd.options.sync_ack
        self.synced = 0
        self.sync_wake = Wakeup()
        self.members: dict[int, Member] = {}
        self.syncing: set[int] = set()
        #: Peers being fed what they lack before they join the stream (catchup.py).
        self.catching_up: dict[int, CatchUp] = {}
        #: Merges (a promise, a sync) one at a time: each appends what the log lacked when it
        #: scanned it.
        self.merge_lock = trio.Lock()
        self.waiters = AckQueue()
        self.fins_out: dict[str, list[bytes]] = {}
        self.fins_count = 0
        self.next_fins = 0.0
        self.next_heartbeat = 0.0
        self.took_office = 0.0
        self.failovers = 0
        self.under_replicated = 0
        self.elections = 0
        #: --replication-trace-file (trace.py): this member's steps; None when off.
        self.trace = repl.trace
        if self.trace is not None:
            self.trace.record(self, "load", saved=saved is not None)

    @property
    def doubled(self) -> bool:
        """POST /topic/takeover: this node's vote counts twice until the other member of its
        two-member set joins again (docs/replication.md section 8)."""
        return self._doubled

    @doubled.setter
    def doubled(self, value: bool) -> None:
        self._doubled = value
        # The quorum is read on every publish (`Stream.quorum_total`): kept with `doubled`
        # rather than counted on each read.
        self.quorum = roles.counted_quorum(self.repl.quorum, value)

    def not_primary(self) -> str:
        primary = self.repl.address_of(self.primary)
        where = f"; primary: {primary}" if primary else ""
        epoch = epoch_text(self.epoch)
        return f"not the primary of replicated topic {self.name} (epoch {epoch}{where})"
