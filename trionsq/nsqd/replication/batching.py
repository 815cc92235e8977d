"""When a replicated topic's accepted publishes are written and streamed (docs/replication.md
section 13, "Publishing"): `FlushWhenIdle`, a Trio instrument that flushes every topic with
something accepted (its log write and MSGS frame, or on a replica its forwarded batch) when
the event loop is about to wait for I/O with nothing left to run, or once the oldest waited
`MAX_DELAY` while the loop stays busy.

Why an instrument rather than a task: a task woken per publish batch costs a scheduler round
trip (and flushes what one pass accepted); the instrument runs in the loop itself, between
two passes, and flushing when the loop is idle gathers everything the connections had to
offer into one write and one frame per member, which halves the frames a member handles with
publishers waiting for their OKs. Flushes are synchronous, so nothing awaits here.
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger("trionsq.nsqd")

#: The longest a flush waits for the loop to go idle (seconds).
MAX_DELAY = 0.0002


#: Messages accepted that are written and streamed at once rather than at the end of the
#: scheduler pass.
FLUSH_AT = 64


class FlushWhenIdle(trio.abc.Instrument):
    """The topics with accepted publishes to flush, flushed between two passes of the loop."""

    def __init__(self) -> None:
        self._due: dict[Stream, None] = {}
        self._since = 0.0

    def schedule(self, replica: Stream) -> None:
        """`replica` has publishes to write and stream (or forward) at the next flush."""
        if not self._due:
            self._since = perf_counter()
        self._due[replica] = None

    def before_io_wait(self, timeout: float) -> None:
        if not self._due or (timeout <= 0 and perf_counter() - self._since < MAX_DELAY):
            return
        self.flush_all()

    def flush_all(self) -> None:
        due, self._due = self._due, {}
        for replica in due:
            if replica.topic.exiting:
                continue
            try:
                replica.end_of_batch()
            except Exception:
                # Never out of the instrument: Trio would remove it, and nothing would flush.
                log.exception("REPLICATION(%s): flush failed", replica.name)
