"""A member's catch-up (docs/replication.md sections 6 and 13): the records of the log that a
member joining the primary's epoch lacks, read from the log file a chunk at a time (about half
of --replication-window) in a worker thread and sent as it acknowledges them (at most a window
unacknowledged), then its switch to the live stream.

The reader follows the file as it grows (publishes go on meanwhile) and the switch is made in
the event loop between two appends, once the reader has reached the end of the file: every
record up to there was read from the file, every one after is streamed, so none is missed and
none sent twice. No compaction starts while a reader follows the file (`ReplicationLog.pins`).
Memory: a chunk and the window, whatever the member's lag.

The catch-up's MSGS frames carry a sequence at or above CATCH_UP_BASE where the stream's carry
its position (messages accepted so far): the member echoes it in its ACK as for any MSGS; the
primary counts such an acknowledgement against the window only, and counts the member for the
quorum from the switch's position once the whole catch-up is acknowledged (an acknowledgement
of a stream frame, which follows the catch-up on the connection, covers it too).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING

import trio

from ..wakeup import Wakeup
from . import wire
from .log import LogSnapshot, without_ids

if TYPE_CHECKING:
    from .joining import Joining
    from .peer import Peer

log = logging.getLogger("trionsq.nsqd")

#: ACK totals at or above this acknowledge catch-up frames, not stream positions.
CATCH_UP_BASE = 1 << 62
#: How often a catch-up waiting for acknowledgements checks that it should go on.
POLL = 0.05
#: Catch-up frames' sequences: increasing, never reused (an acknowledgement of an earlier
#: catch-up's frame never counts for a later one).
_sequences = itertools.count(1)


class CatchUp:
    """The catch-up frames sent to one member and not yet acknowledged."""

    __slots__ = ("progress_at", "unacked", "unacked_bytes", "wake")

    def __init__(self) -> None:
        self.unacked: deque[tuple[int, int]] = deque()  # (sequence, frame size)
        self.unacked_bytes = 0
        self.wake = Wakeup()
        #: When the member last acknowledged a frame (or was sent one with none pending).
        self.progress_at = 0.0

    def frame_sent(self, sequence: int, size: int) -> None:
        if not self.unacked:
            self.progress_at = trio.current_time()
        self.unacked.append((sequence, size))
        self.unacked_bytes += size

    def acknowledged(self, total: int) -> int:
        """The member wrote the frames up to `total`; returns the bytes they took."""
        sequence = total - CATCH_UP_BASE
        unacked = self.unacked
        freed = 0
        while unacked and unacked[0][0] <= sequence:
            freed += unacked.popleft()[1]
        self.unacked_bytes -= freed
        self.progress_at = trio.current_time()
        self.wake.set()
        return freed

    def all_acknowledged(self) -> int:
        """A later frame was acknowledged (acknowledgements are cumulative)."""
        freed = self.unacked_bytes
        self.unacked.clear()
        self.unacked_bytes = 0
        return freed


def _lacking_chunk(
    reader: LogSnapshot, offset: int, end: int, max_bytes: int, theirs: set[bytes]
) -> tuple[bytes, int, int]:
    """The records of a chunk of the log whose IDs are not in `theirs`, how many, and where the
    chunk ends (blocking; corrupt records are skipped)."""
    data, after = reader.chunk(offset, end, max_bytes)
    kept, count = without_ids(data, theirs)
    return kept, count, after


async def catch_up(
    replica: Joining,
    peer: Peer,
    epoch: int,
    theirs: set[bytes],
    start: tuple[int, int] = (0, 0),
    obsolete: set[bytes] | None = None,
) -> int | None:
    """Send `peer` the records of the log it lacks (their IDs are not in `theirs`; it lacks
    none before `start`, the log's generation and an offset), paced by its acknowledgements,
    then make it a member (`TopicReplica.join_stream`: `obsolete`, what it holds that this
    node dropped as finished everywhere, is finished for it). Returns how many records were sent, or
    None if it ended first (this node no longer leads `epoch`, the connection was lost, the
    topic closed)."""
    topic_log = replica.log
    node_id = peer.node_id
    assert node_id is not None
    connection = peer.connections
    nsqd = replica.repl.nsqd
    window = nsqd.options.replication_window
    chunk = max(window // 2, 1)  # a record larger than that is read whole all the same
    stalled = nsqd.options.replication_ack_timeout

    def going_on() -> bool:
        return replica.leads(epoch) and peer.connected and peer.connections == connection

    while topic_log.compacting:  # its file is about to be replaced: follow the new one
        if not going_on():
            return None
        await trio.sleep(POLL)
    if not going_on():
        return None
    try:
        reader = topic_log.snapshot()
    except OSError as err:
        log.error("REPLICATION(%s): failed to read the log - %s", replica.name, err)
        return None
    state = CatchUp()
    replica.catching_up[node_id] = state
    topic_log.pins += 1
    offset = start[1] if start[0] == topic_log.generation else 0
    sent = 0
    try:
        while True:
            replica.flush()  # what was accepted is in the file, or it would be missed
            end = topic_log.bytes
            if offset >= end and state.unacked_bytes <= window // 2:
                replica.join_stream(peer, epoch, state, obsolete or set())
                return sent
            if offset >= end or (state.unacked and state.unacked_bytes + chunk > window):
                if state.unacked and trio.current_time() - state.progress_at > stalled:
                    log.warning(
                        "REPLICATION(%s): node %d acknowledges nothing of its catch-up",
                        replica.name,
                        node_id,
                    )
                    return None  # synced again at a later tick
                with trio.move_on_after(POLL):
                    await state.wake.wait()
            else:
                try:
                    blob, count, offset = await nsqd.run_blocking(
                        _lacking_chunk, reader, offset, end, chunk, theirs
                    )
                except (OSError, ValueError) as err:
                    log.error("REPLICATION(%s): failed to read the log - %s", replica.name, err)
                    return None
                if blob and going_on():
                    sequence = next(_sequences)
                    frame = wire.encode_stream(
                        wire.MSGS, replica.name, epoch, CATCH_UP_BASE + sequence, blob
                    )
                    peer.send(frame)
                    state.frame_sent(sequence, len(frame))
                    sent += count
            if not going_on():
                return None
    finally:
        reader.close()
        topic_log.pins -= 1
        if replica.catching_up.get(node_id) is state:
            del replica.catching_up[node_id]
