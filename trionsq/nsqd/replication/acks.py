"""Publishers waiting for a quorum (docs/replication.md section 6, "Publishing"): a replicated
topic's `AckQueue` of waiters, each released once a quorum has written the stream up to its
target, or failed (the primary stepped down, or --replication-ack-timeout passed).

Two kinds of waiter, both without a cancel scope or an Event per PUB (they cost more than the
rest of a replicated PUB's wait; the timeout is checked by `Replication`'s expiry task):

- `HeldAnswers`: a V2 connection's read batch. Its answers stay in the connection's output
  buffer (`ClientV2.holding`) while its command loop goes back to reading; the release sends
  them from the releasing task (`ClientV2.send_now`), so the connection's task is not woken
  for it. A command read before the release waits for it (`wait`): answers stay in order, and
  a connection has one batch held at a time.
- `TaskWaiter`: a task that waits (HTTP ``/pub``, ``--sync-ack``'s path).

What they wait for (`Owed`, the keys of `ClientV2.owed`): a replicated topic this node leads
(`TopicReplica`: a stream position on a quorum), or a batch of messages forwarded to the
primary (`forward.ForwardBatch`: its answer).
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Protocol

import outcome
import trio

from ...protocol.client_states import STATE_DISCONNECTED
from ...protocol.errors import E_PUB_FAILED, ProtocolError
from ...protocol.frames import encode_error
from ..heartbeats import start_pump

if TYPE_CHECKING:
    from ..client_v2 import ClientV2

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
    def wait_for(self, target: int, waiter: Waiter) -> bool:
        """Register `waiter` for what `target` names (`done` is called once); False: it
        is already so, and the waiter is not registered."""
        ...


class AckQueue:
    """One replicated topic's waiters, by target (a stream position: messages accepted)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, float, Waiter]] = []
        self._seq = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, target: int, deadline: float, waiter: Waiter) -> None:
        heapq.heappush(self._heap, (target, next(self._seq), deadline, waiter))

    def release(self, total: int) -> None:
        """Every waiter whose target is within `total` (what a quorum has written)."""
        heap = self._heap
        while heap and heap[0][0] <= total:
            heapq.heappop(heap)[3].done(True)

    def fail_all(self) -> None:
        heap, self._heap = self._heap, []
        for entry in heap:
            entry[3].done(False)

    def expire(self, now: float) -> None:
        """Fail the waiters whose deadline has passed."""
        heap = self._heap
        if not heap:
            return
        late = [entry for entry in heap if entry[2] <= now]
        if not late:
            return
        self._heap = [entry for entry in heap if entry[2] > now]
        heapq.heapify(self._heap)
        for entry in late:
            entry[3].done(False)


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


async def wait_replicated(owed: dict[Owed, int]) -> bool:
    """Wait until each replicated topic of `owed` has on a quorum the messages it had
    accepted at the position given, and each forwarded batch is acknowledged by the primary
    (False: one failed)."""
    waiter = TaskWaiter(len(owed))
    for replica, target in owed.items():
        if not replica.wait_for(target, waiter):
            waiter.done(True)
    return await waiter.wait()


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
