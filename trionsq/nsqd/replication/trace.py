"""The replication trace (``--replication-trace-file``, docs/replication.md "Trace
validation"): `TraceRecorder`, which appends this member's steps for its replicated topics to a
file, one JSON object per line, for ``python -m spec trace`` (spec/trace_check.py) to replay
against the spec (spec/replication.py), as etcd's raft validates its traces against its TLA+
spec.

Every line has ``node`` (``--node-id``), ``seq`` (this node's sequence number, continued
across restarts from the file's last line), ``wall`` (``time.time()``), ``mono``
(``time.monotonic()``: one clock for every process of a host) and ``ev``; a topic's step also
``topic`` and the member's ``role`` and ``epoch`` when it is recorded (before the step for
``promise``, after it otherwise), and the step's own fields:

- ``start`` (``pid``, ``boot``: the host's boot ID, ``members``: the replica set's size,
  ``degraded``), ``stop``: the process starts (every topic a replica again) or stops cleanly;
- ``load`` (``saved``: nsqd.dat held its epoch): a replicated topic is created here (at start
  from nsqd.dat, or when first named), a replica of the epoch on disk; ``deleted``: it is
  deleted here;
- ``stand`` (``force``): a candidate in a new epoch; ``promise`` (``to``, ``promised``): this
  node promises a candidate's epoch (the ``step_down`` that follows adopts it); ``merge``
  (``sender``, ``fetched``): a peer's state merged (a promise as a candidate, a member's
  summary as the primary, a repair as a replica); ``take_office`` (``doubled``, ``pos``: the
  stream position it starts from); ``step_down`` (``was``, ``why``): a replica of the epoch;
- ``wrote`` (``sender``, ``of``: the stream's epoch, ``total``: its position, at or above
  2^62 for a catch-up frame): a primary (``sender`` itself) wrote and streamed its log up to
  ``total``, or a replica wrote a primary's frame; ``ack`` (``pos``, ``members``: each
  member's acknowledged position as the primary counts it): publishes up to ``pos`` are
  acknowledged; ``join`` (``member``, ``pos``): a member joins the primary's stream, holding
  everything up to ``pos``;
- ``fins_sent`` (``count``, ``to``): a FIN batch to the members; ``fins`` (``sender``, ``of``,
  ``count``): a FIN batch merged by a replica.

Writing costs the event loop a ``json.dumps`` per step and a ``write(2)`` to the page cache
per flush: lines are buffered and written every `FLUSH_INTERVAL`, at `FLUSH_BYTES`, and at
once after a change of role or epoch (so that what a peer reacts to is in the file before it
can be killed). A ``kill -9`` loses at most the unflushed tail; a line cut short is completed
by a newline before the next process's first, and the checker accepts it. A disk that refuses
the trace turns tracing off (logged once): it never stops the daemon. Without the flag nothing
here runs: the daemon's only cost is a ``trace is not None`` check at each step.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from ..options import NSQDOptions
    from .replica_state import Member, ReplicaState

log = logging.getLogger("trionsq.nsqd")

#: The trace's format (the ``start`` line's ``format``).
FORMAT = 1
#: How often buffered lines are written.
FLUSH_INTERVAL = 0.1
#: Buffered bytes that are written at once.
FLUSH_BYTES = 64 * 1024
#: Steps written at once, with what was buffered before them: changes of role or epoch.
FLUSHED = frozenset(
    {"start", "stop", "load", "deleted", "stand", "promise", "take_office", "step_down"}
)
#: How much of an existing file's end is read for its last sequence number.
_TAIL = 64 * 1024


def boot_id() -> str:
    """This host's boot ID (Linux), else its name: traces with the same one share a
    monotonic clock."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def last_seq(path: str) -> tuple[int, bool]:
    """The last sequence number in the trace at `path` (-1: none), and whether the file ends
    in the middle of a line (a process killed while writing)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL))
            tail = f.read()
    except FileNotFoundError:
        return -1, False
    for line in reversed(tail.splitlines()):
        try:
            seq = json.loads(line).get("seq")
        except (ValueError, AttributeError):
            continue
        if isinstance(seq, int):
            return seq, not tail.endswith(b"\n")
    return -1, bool(tail) and not tail.endswith(b"\n")


class TraceRecorder:
    """One member's trace: `record` a topic's step, `acknowledged` a quorum's position."""

    def __init__(self, path: str, node_id: int, *, members: int, degraded: str) -> None:
        self.path = path
        self.node_id = node_id
        seq, torn = last_seq(path)
        self.seq = seq + 1
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._buffer: list[str] = ["\n"] if torn else []
        self._size = 0
        #: Per topic, the epoch and position of the latest `ack` recorded.
        self._acked: dict[str, tuple[int, int]] = {}
        self._emit(
            "start",
            {
                "format": FORMAT,
                "pid": os.getpid(),
                "boot": boot_id(),
                "members": members,
                "degraded": degraded,
            },
        )

    @property
    def closed(self) -> bool:
        return self._fd is None

    def _emit(self, event: str, fields: Mapping[str, Any]) -> None:
        if self._fd is None:
            return
        line = {
            "node": self.node_id,
            "seq": self.seq,
            "wall": round(time.time(), 6),
            "mono": round(time.monotonic(), 6),
            "ev": event,
            **fields,
        }
        self.seq += 1
        text = json.dumps(line, separators=(",", ":")) + "\n"
        self._buffer.append(text)
        self._size += len(text)
        if event in FLUSHED or self._size >= FLUSH_BYTES:
            self.flush()

    def record(self, replica: ReplicaState, event: str, **fields: Any) -> None:
        """A step of `replica`'s topic, with the member's role and epoch as they are now."""
        state = {"topic": replica.name, "role": replica.role, "epoch": replica.epoch}
        self._emit(event, {**state, **fields})

    def acknowledged(self, replica: ReplicaState, position: int) -> None:
        """Publishes up to `position` acknowledged (a quorum has them, as the primary counts
        it): recorded with what each member has acknowledged, when it grows."""
        if position < 0:
            return  # no quorum
        previous = self._acked.get(replica.name)
        if previous is not None and previous[0] == replica.epoch and previous[1] >= position:
            return
        self._acked[replica.name] = (replica.epoch, position)
        self.record(replica, "ack", pos=position, members=_positions(replica.members))

    def flush(self) -> None:
        """Write what is buffered (a failing disk turns tracing off)."""
        if self._fd is None or not self._buffer:
            return
        data = "".join(self._buffer).encode()
        self._buffer.clear()
        self._size = 0
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as err:
            log.error("REPLICATION: trace %s turned off - %s", self.path, err)
            self._close_fd()

    async def run(self) -> None:
        """Write what is buffered every `FLUSH_INTERVAL` (a task of `Replication`)."""
        while self._fd is not None:
            await trio.sleep(FLUSH_INTERVAL)
            self.flush()

    def close(self) -> None:
        """The last line (``stop``), written; nothing is recorded after."""
        self._emit("stop", {})
        self.flush()
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _positions(members: Mapping[int, Member]) -> dict[str, int]:
    return {str(node_id): member.acked for node_id, member in members.items()}


def open_trace(options: NSQDOptions, members: int) -> TraceRecorder | None:
    """This member's trace (`options`: nsqd's), or None without --replication-trace-file."""
    path = options.replication_trace_file
    if not path:
        return None
    return TraceRecorder(
        path, options.node_id, members=members, degraded=options.replication_degraded
    )
