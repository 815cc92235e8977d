"""PUB's OK, in one place: when a publish is acknowledged. At once (NSQ's default), after
the fsync with --sync-ack, or once a layer above the core has it: a topic's `put_frames`
hands back a `Receipt` (what to wait for: an `Owed` and a target), as a replicated topic does
(docs/replication.md section 6: a stream position on a quorum, or a batch forwarded to the
primary, trionsq/nsqd/replication/). The core never needs to know which.

The waits, without a cancel scope or an Event per PUB (they cost more than the rest of a
replicated PUB's wait; a layer's timeouts are its own):

- `HeldAnswers`: a V2 connection's read batch. Its answers stay in the connection's output
  buffer (`ClientV2.holding`) while its command loop goes back to reading; the release sends
  them from the releasing task (`ClientV2.send_now`), so the connection's task is not woken
  for it. A command read before the release waits for it (`wait`): answers stay in order, and
  a connection has one batch held at a time.
- `TaskWaiter`: a task that waits (HTTP ``/pub``, ``--sync-ack``'s path: `wait_durable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import outcome
import trio

from ..protocol.client_states import STATE_DISCONNECTED
from ..protocol.errors import E_PUB_FAILED, ProtocolError
from ..protocol.frames import encode_error
from .heartbeats import start_pump

if TYPE_CHECKING:
    from .client_v2 import ClientV2
    from .nsqd import NSQD

#: What a connection whose publish was not made durable (--sync-ack's fsync, or a quorum)
#: receives before it is closed.
NOT_DURABLE = ProtocolError(
    E_PUB_FAILED,
    "PUB failed to make the message durable (fsync failed, or not written by a quorum of replicas)",
)


#: How long a failed connection's error frame may take to send before it closes.
CLOSE_TIMEOUT = 1.0


class Waiter(Protocol):
    def done(self, ok: bool) -> None: ...


class Owed(Protocol):
    """What a publish may wait for beyond the disk (a replicated topic, a forwarded batch)."""

    def wait_for(self, target: int, waiter: Waiter) -> bool:
        """Register `waiter` for what `target` names (`done` is called once); False: it
        is already so, and the waiter is not registered."""
        ...


#: What a topic's `put_frames` hands back when the publish's OK must wait for more than the
#: disk: the `Owed` and its target.
Receipt = tuple[Owed, int]


class _Countdown:
    """Waits for `count` things, each ending with `done(ok)`; `finished` runs after the
    last. A task may park in `wait` meanwhile."""

    __slots__ = ("_failed", "_pending", "_task")

    def __init__(self, count: int) -> None:
        self._pending = count
        self._failed = False
        self._task: trio.lowlevel.Task | None = None

    def done(self, ok: bool) -> None:
        self._pending -= 1
        if not ok:
            self._failed = True
        if self._pending <= 0:
            self.finished()

    def finished(self) -> None:
        self._wake()

    def _wake(self) -> bool:
        """Reschedule the task parked in `wait`, if any."""
        task = self._task
        if task is None:
            return False
        self._task = None
        trio.lowlevel.reschedule(task, outcome.Value(None))
        return True

    async def wait(self) -> bool:
        """Until every thing is done; False if one failed."""
        if self._pending > 0:
            self._task = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                self._task = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        return not self._failed


class TaskWaiter(_Countdown):
    """A task parked until its waits are done (`wait`)."""

    __slots__ = ()


def published(client: ClientV2, receipt: Receipt | None) -> None:
    """A V2 connection's PUB, MPUB or DPUB was accepted and its OK queued (with --sync-ack
    or a layer above: the caller checked `NSQD.hold_acks`): the OK waits for the disk, and
    for what the topic's `put_frames` handed back."""
    client.unsynced_publish = True
    if receipt is not None:
        owed = client.owed
        if owed is None:
            owed = client.owed = {}
        owed[receipt[0]] = receipt[1]


def hold_answers(client: ClientV2) -> None:
    """Without --sync-ack: the connection's answers stay in its output buffer until what its
    read batch is owed is so, and are sent from the task that sees it (`HeldAnswers`); the
    connection's task reads on meanwhile."""
    owed, client.owed = client.owed, None
    if not owed:
        return
    held = HeldAnswers(client, len(owed))
    for owed_to, target in owed.items():
        if not owed_to.wait_for(target, held):
            held.done(True)


async def wait_durable(nsqd: NSQD, owed: dict[Owed, int] | None = None) -> bool:
    """--sync-ack: wait until every message accepted so far is fsynced, and nsqd.dat names
    its topic and channels; and until each of `owed` has what it is owed (a replicated
    topic: the messages accepted at that position on a quorum). False if the disk failed to
    make it so, or one of `owed` failed."""
    ok = True
    if nsqd.options.sync_ack:
        ok = await nsqd.disk_syncer.wait_durable()
        if nsqd.metadata.pending:
            ok = await nsqd.metadata.flush() and ok
    if owed:
        waiter = TaskWaiter(len(owed))
        for owed_to, target in owed.items():
            if not owed_to.wait_for(target, waiter):
                waiter.done(True)
        ok = await waiter.wait() and ok
    return ok


async def wait_published(nsqd: NSQD, receipt: Receipt | None) -> bool:
    """HTTP ``/pub`` and ``/mpub`` (the caller checked `NSQD.hold_acks`): `wait_durable`
    for what the topic's `put_bodies` handed back."""
    return await wait_durable(nsqd, None if receipt is None else {receipt[0]: receipt[1]})


class HeldAnswers(_Countdown):
    """A connection's answers held until every replicated topic its read batch published to
    has the messages on a quorum. On failure its output is replaced by a fatal E_PUB_FAILED
    and the connection closes (the publisher sees no OK and publishes again). If the command
    loop reads more meanwhile, it waits (`wait`: False when the answers failed, the output
    then holds the error to send before closing)."""

    __slots__ = ("_client",)

    def __init__(self, client: ClientV2, count: int) -> None:
        super().__init__(count)
        self._client = client
        client.holding = True
        client.held = self

    def finished(self) -> None:
        client = self._client
        client.holding = False
        if not self._failed:
            client.held = None  # (a failed one stays: the command loop reads no more)
        if self._failed:
            client.out = bytearray(encode_error(NOT_DURABLE.body))
        if self._wake():
            return  # the command loop waited in `wait`: it sends (or closes) itself
        if client.state == STATE_DISCONNECTED:
            return
        if self._failed:
            # No more deliveries; the error is sent, then the connection closes.
            client.state = STATE_DISCONNECTED
            client.nsqd.start_client_task(_send_then_close, client)
            return
        client.send_now()
        if client.out:
            start_pump(client)  # what the socket did not take now (or a TLS stream's)


async def _send_then_close(client: ClientV2) -> None:
    try:
        with trio.move_on_after(CLOSE_TIMEOUT):
            await client.drain()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    client.close_connection()
