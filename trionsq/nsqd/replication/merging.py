"""Merging another member's state (docs/replication.md section 7: merging is a union): its
summary (the IDs it holds, its FINs, what it dropped), the messages this node lacks fetched
from it, its FINs and dropped IDs applied here. The scans of the log run in worker threads on
a snapshot.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from . import wire
from .admin_sync import AdminSync
from .channel import ReplicatedChannel
from .log import (
    LogSnapshot,
    decode_records,
    scan_ids,
    split_ids,
)
from .roles import PRIMARY

if TYPE_CHECKING:
    from .peer import Peer

log = logging.getLogger("trionsq.nsqd")


_T = TypeVar("_T")


def _joined_ids(snapshot: LogSnapshot) -> tuple[int, bytes]:
    """The IDs of the log's records, joined, and how many (a repeated ID is there twice:
    the receiver makes a set of them)."""
    pieces = [b"".join(scan_ids(data)[0]) for data in snapshot.chunks()]
    joined = b"".join(pieces)
    return len(joined) // 16, joined


def _lacking(
    ids: set[bytes], held: set[bytes], read_dropped: Callable[[], set[bytes]]
) -> tuple[list[bytes], set[bytes], list[bytes]]:
    """Of `ids` (a peer's): those this node lacks, those it dropped as finished everywhere
    (the file of dropped IDs is read only if the peer holds any ID not held here); and the
    IDs this node holds that the peer does not (blocking, a worker thread's work)."""
    ours_only = list(held - ids)
    theirs_only = ids - held
    if not theirs_only:
        return [], set(), ours_only
    dropped = read_dropped()
    obsolete = theirs_only & dropped
    return [i for i in theirs_only if i not in obsolete], obsolete, ours_only


class Merged(NamedTuple):
    """A peer's state merged here (`TopicReplica.merge_from`)."""

    #: The IDs the peer holds.
    theirs: set[bytes]
    #: Where in this node's log the first message the peer lacks is: (generation, offset).
    start: tuple[int, int]
    #: IDs the peer holds that this node dropped as finished everywhere.
    obsolete: set[bytes]


class Merging(AdminSync):
    """Merging: see the module's docstring."""

    async def _scan(self, fn: Callable[[LogSnapshot], _T]) -> _T:
        """`fn` of a snapshot of the log, in a worker thread. Raises OSError (a malformed
        record too: the file was damaged under this node)."""
        snapshot = self.log.snapshot()
        try:
            result: _T = await self.repl.nsqd.run_blocking(fn, snapshot)
            return result
        except ValueError as err:
            raise OSError(errno.EIO, f"malformed replication log - {err}") from None
        finally:
            snapshot.close()

    async def summary(self) -> tuple[dict[str, Any], bytes]:
        """What this node holds: every message ID (a scan of the log), and per channel its
        finished IDs."""
        count, held = await self._scan(_joined_ids)
        names = list(self.log.finished)
        emptied = self.log.emptied
        header = {
            "count": count,
            "channels": {n: len(self.log.finished[n]) for n in names},
            "admin": self.admin.to_json(),
            "emptied": len(emptied),
        }
        blob = held + b"".join(b"".join(self.log.finished[n]) for n in names)
        return header, blob + b"".join(emptied)

    @staticmethod
    def parse_summary(
        header: dict[str, Any], blob: bytes
    ) -> tuple[set[bytes], dict[str, list[bytes]]]:
        try:
            count = int(header.get("count", 0))
            channels = {str(name): int(n) for name, n in (header.get("channels") or {}).items()}
        except (AttributeError, TypeError, ValueError):
            raise wire.WireError("bad summary") from None
        if count < 0 or any(n < 0 for n in channels.values()):
            raise wire.WireError("bad summary")
        pos = count * 16
        ids = set(split_ids(blob[:pos]))
        fins: dict[str, list[bytes]] = {}
        for name, n in channels.items():
            fins[name] = split_ids(blob[pos : pos + n * 16])
            pos += n * 16
        try:
            pos += int(header.get("emptied", 0)) * 16  # `summary_emptied`
        except (TypeError, ValueError):
            raise wire.WireError("bad summary") from None
        if pos != len(blob):
            raise wire.WireError("bad summary")
        return ids, fins

    @staticmethod
    def summary_emptied(header: dict[str, Any], blob: bytes) -> list[bytes]:
        """The IDs /topic/empty dropped, at the end of a summary."""
        count = int(header.get("emptied", 0))
        start = len(blob) - count * 16
        return [blob[start + i * 16 : start + i * 16 + 16] for i in range(count)]

    async def read_summary(
        self, peer: Peer, header: dict[str, Any], blob: bytes
    ) -> tuple[set[bytes], dict[str, list[bytes]]] | None:
        """`parse_summary` in a worker thread; None (logged) if it is malformed."""
        try:
            parsed: tuple[set[bytes], dict[str, list[bytes]]] = await self.repl.nsqd.run_blocking(
                self.parse_summary, header, blob
            )
        except wire.WireError as err:
            log.error("REPLICATION(%s): node %s - %s", self.name, peer.node_id, err)
            return None
        return parsed

    async def merge_summary(self, peer: Peer, header: dict[str, Any], blob: bytes) -> Merged | None:
        """A peer's summary (a promise, a sync) merged here: its admin state, its messages
        and FINs (`merge_from`). None if the summary is malformed or the bodies could not be
        fetched."""
        summary = await self.read_summary(peer, header, blob)
        if summary is None:
            return None
        self.merge_admin(header.get("admin"), self.summary_emptied(header, blob))
        return await self.merge_from(peer, *summary)

    async def merge_from(
        self, peer: Peer, ids: set[bytes], fins: dict[str, list[bytes]]
    ) -> Merged | None:
        """Adopt a peer's messages and FINs (a promise or a sync): union. A message the peer
        holds that this node's compaction dropped (finished by every channel here) is not
        fetched: it is `obsolete` for the peer. None if the bodies could not be fetched."""
        async with self.merge_lock:
            generation = self.log.generation
            try:
                held, first_lacking = await self._scan(
                    lambda snapshot: snapshot.ids_and_first_lacking(ids)
                )
            except OSError as err:
                log.error("REPLICATION(%s): failed to read the log - %s", self.name, err)
                return None
            try:
                missing, obsolete, ours_only = await self.repl.nsqd.run_blocking(
                    _lacking, ids, held, self.log.read_dropped
                )
            except OSError as err:
                log.error("REPLICATION(%s): failed to read the dropped IDs - %s", self.name, err)
                return None
            written = b""
            if missing:
                answer = await peer.ask(
                    wire.WANT,
                    {"topic": self.name},
                    b"".join(missing),
                    timeout=self.repl.nsqd.options.replication_ack_timeout,
                )
                if answer is None or answer[0] != wire.BODIES:
                    return None
                try:
                    records = await self.repl.nsqd.run_blocking(decode_records, answer[2])
                except ValueError as err:
                    log.error(
                        "REPLICATION(%s): node %s - bad BODIES - %s", self.name, peer.node_id, err
                    )
                    return None
                self.flush()  # the totals streamed below must cover only what the log holds
                written = self.log.append(records, known=held)
                if written and self.sync_ack:
                    self.sync_wake.set()
            # The peer's FINs before its messages are served: what it knows finished is not
            # delivered again (a message this node had compacted away and forgotten, which
            # the peer still holds as finished, would otherwise be).
            self._merge_fins(fins, held)
            if ours_only:
                theirs_dropped = await self._merge_dropped(peer, ours_only, held)
                if theirs_dropped is None:
                    return None
                ids |= theirs_dropped  # not caught up with: it has no use for them
            if written and self.role == PRIMARY:
                # Messages only the peer had: served, and sent to the other members.
                records = decode_records(written)
                self.accepted += len(records)
                self.topic.deliver_records(records)
                self._stream(written)
            if self.trace is not None:
                self.trace.record(self, "merge", sender=peer.node_id, fetched=len(missing))
            return Merged(ids, (generation, first_lacking), obsolete)

    async def _merge_dropped(
        self, peer: Peer, ours_only: list[bytes], held: set[bytes]
    ) -> set[bytes] | None:
        """Ask the peer which of the messages this node holds and it does not its compaction
        dropped (finished by every channel there), and finish those here for every channel:
        a member that missed their FINs learns them from one that compacted them away.
        Returns those IDs; None if the peer did not answer."""
        answer = await peer.ask(
            wire.ASK_DROPPED,
            {"topic": self.name},
            b"".join(ours_only),
            timeout=self.repl.nsqd.options.replication_ack_timeout,
        )
        if answer is None or answer[0] != wire.DROPPED:
            return None
        finished = set(split_ids(answer[2])).intersection(ours_only)
        if finished:
            self._merge_fins({name: list(finished) for name in self.log.finished}, held)
        return finished

    def _merge_fins(self, fins: dict[str, list[bytes]], held: set[bytes]) -> None:
        """A peer's finished sets, merged. As the primary, the messages they finish that a
        channel still holds (queued, deferred, in flight) are not delivered by it again, and
        the FINs go to the other members."""
        primary = self.role == PRIMARY
        for name, done in fins.items():
            if self.admin.deleted(name):
                continue
            finished = self.log.finished.get(name)
            if finished is None:
                finished = self.log.finished[name] = set()
            new = set(done)
            new -= finished
            if not new:
                continue
            self.log.finish(name, new)
            if not primary:
                continue
            channel = self.topic.channels.get(name)
            if isinstance(channel, ReplicatedChannel):
                channel.skip_finished(new & held)
            self.fins_out.setdefault(name, []).extend(new)
            self.fins_count += len(new)
