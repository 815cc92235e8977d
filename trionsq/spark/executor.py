"""The executor side of the staged source: one Spark task reads its share of a micro-batch
straight from its nsqd (`read_partition`), stages it in the write-ahead log, FINs it, and returns
the rows as one Arrow record batch. Runs in Spark's Python workers: each task is one
``trio.run`` with its own connections, closed before the task returns (nothing is held across
tasks: FIN must go over the connection that received the message)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio
from pyspark.sql.datasource import InputPartition

from ..client.connection import Connection
from ..client.errors import ClientError, ConnectionClosedError, NotConnectedError, TLSError
from ..protocol import commands
from .options import NSQD_MAX_RDY, SourceOptions
from .staging import StagingLog

__all__ = ["StagedPartition", "decode_payloads", "read_partition"]

log = logging.getLogger("trionsq.spark")

#: A message's header: timestamp (ns), attempts; then the 16-byte id and the body.
_HEAD = [("ts", ">i8"), ("attempts", ">u2")]
#: Schema metadata of a staged table: the messages received (see `received`).
_RECEIVED = b"trionsq.received"


class StagedPartition(InputPartition):
    """One task of a micro-batch: read at most `limit` messages of the query's topic/channel
    from `nsqd` and stage them as (`batch`, `index`) in the query's staging log `log` (a
    directory under ``stagingLocation``). Plain attributes: Spark pickles it to the executor."""

    def __init__(self, batch: int, index: int, nsqd: str, limit: int, log: str = "") -> None:
        super().__init__(index)
        self.log = log
        self.batch = batch
        self.index = index
        self.nsqd = nsqd
        self.limit = limit

    def __repr__(self) -> str:
        return f"StagedPartition(b{self.batch}, p{self.index}, {self.nsqd}, {self.limit})"


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("body", pa.binary(), False),
            pa.field("id", pa.string(), False),
            pa.field("timestamp", pa.timestamp("us", tz="UTC"), False),
            pa.field("attempts", pa.int32(), False),
            pa.field("nsqd", pa.string(), False),
            pa.field("topic", pa.string(), False),
        ]
    )


def decode_payloads(payloads: list[bytes], nsqd: str, topic: str) -> Any:
    """Wire payloads (timestamp, attempts, id, body) as one Arrow record batch in
    SOURCE_SCHEMA's layout. Column-wise: one Python pass takes the 10-byte headers, Arrow and
    numpy do the rest (about 1 µs a message less than decoding message by message)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(payloads)
    wire = pa.array(payloads, pa.binary())
    head = np.frombuffer(b"".join([p[:10] for p in payloads]), dtype=_HEAD)
    zeros = pa.array(np.zeros(n, np.int32))
    # nsqd and topic: one value repeated (a dictionary of one entry, cast to plain strings).
    return pa.RecordBatch.from_arrays(
        [
            # An explicit stop: pyarrow 26 fails ("Negative buffer resize") without one.
            pc.binary_slice(wire, 26, max(map(len, payloads))) if n else pa.array([], pa.binary()),
            pc.binary_slice(wire, 10, 26).cast(pa.string()) if n else pa.array([], pa.string()),
            pa.array(head["ts"].astype(np.int64) // 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(head["attempts"].astype(np.int32)),
            pa.DictionaryArray.from_arrays(zeros, pa.array([nsqd])).cast(pa.string()),
            pa.DictionaryArray.from_arrays(zeros, pa.array([topic])).cast(pa.string()),
        ],
        schema=_schema(),
    )


def with_received(batch: Any, count: int) -> Any:
    """`batch` saying (in its schema's metadata, staged with it) how many messages the task
    received: more than its rows when redelivered copies were dropped."""
    return batch.replace_schema_metadata({_RECEIVED: str(count)})


def received(table: Any) -> int:
    """How many messages the task that staged `table` received from nsqd (copies included):
    0 means nsqd had nothing for it, not that every message it sent was a dropped copy."""
    metadata = table.schema.metadata or {}
    return int(metadata.get(_RECEIVED, table.num_rows))


def read_partition(part: StagedPartition, options: SourceOptions) -> Iterator[Any]:
    """The rows of `part`: from the staging log if it was staged before (a task retry, a batch
    re-run after a driver restart), else read from nsqd, staged, FIN'd."""
    staging = StagingLog(os.path.join(options.staging_location, part.log))
    staged = staging.read(part.batch, part.index)
    if staged is None and staging.committed(part.batch):
        # A straggler (its batch was committed with another attempt's rows): take nothing.
        log.warning("%r: the batch is committed already: nothing read", part)
        return
    if staged is None:
        try:
            staged = trio.run(_consume, part, options, staging)
        except BaseExceptionGroup as group:
            raise _first(group) from None
    yield from staged.to_batches()


def _fault(point: str) -> None:
    """Testing only: with TRIONSQ_SPARK_FAULTS naming a directory, a task reaching `point`
    ("before-stage", "after-stage", "before-cls", "after-fin") while the file of that name
    exists there acts on it. An empty file: the task removes it and kills its Python worker
    (os._exit), as a crashed executor would. A file saying ``pause``: the task writes
    ``<point>.reached`` and waits (at most a minute) until the test removes the file, so that
    a test can act at that point (freeze the task's nsqd)."""
    directory = os.environ.get("TRIONSQ_SPARK_FAULTS")
    if not directory:
        return
    path = os.path.join(directory, point)
    try:
        with open(path) as f:
            action = f.read().strip()
    except FileNotFoundError:
        return
    if action == "pause":
        with open(f"{path}.reached", "w"):
            pass
        deadline = time.monotonic() + 60
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    log.warning("fault injected at %s", point)
    os._exit(17)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def _answer(part: StagedPartition, options: SourceOptions, step: str, reply: Any) -> Any:
    """Await nsqd's `reply` to `step`, at most readTimeout: an nsqd that stops answering (frozen,
    or cut off) fails the task, which Spark retries, instead of holding the micro-batch until
    two heartbeats are missed."""
    with trio.move_on_after(options.read_timeout) as scope:
        return await reply
    assert scope.cancelled_caught
    raise RuntimeError(
        f"nsq source {part!r}: nsqd {part.nsqd} did not answer {step} within readTimeout "
        f"({options.read_timeout:g} s)"
    )


async def _consume(part: StagedPartition, options: SourceOptions, staging: StagingLog) -> Any:
    import pyarrow as pa

    limit = part.limit
    # nsqd allows --max-rdy-count (2500 by default) in flight per connection: RDY summed over
    # the connections is exactly `limit`, so nsqd can never send more than the task's share.
    n_conns = max(1, math.ceil(limit / NSQD_MAX_RDY))
    received: dict[Connection, list[bytes]] = {}
    state = {"count": 0, "last": trio.current_time()}
    enough = trio.Event()

    def on_messages(conn: Connection, payloads: list[bytes]) -> None:
        received[conn] += payloads
        state["count"] += len(payloads)
        state["last"] = trio.current_time()
        if state["count"] >= limit:
            enough.set()

    phases = _Phases()
    conn_options = options.connection_options()
    async with trio.open_nursery() as nursery:

        async def subscribe(conn: Connection) -> None:
            await _answer(part, options, "IDENTIFY", nursery.start(conn.run))
            sub = commands.sub(options.topic, options.channel)
            await _answer(part, options, "SUB", conn.request(sub))

        try:
            conns = [
                Connection(part.nsqd, conn_options, on_messages=on_messages) for _ in range(n_conns)
            ]
            received.update((conn, []) for conn in conns)
            try:
                await subscribe(conns[0])
            except NotConnectedError as exc:
                if not _refused(exc):
                    raise
                # nsqd is not there (gone since planning): nothing taken, nothing
                # lost; the partition is staged empty so that a re-run agrees.
                log.warning("%r: %s: staged empty", part, exc)
                empty = decode_payloads([], part.nsqd, options.topic)
                if staging.write(part.batch, part.index, empty):
                    staging.confirm(part.batch, part.index)
                return staging.read(part.batch, part.index)
            # The others at once: one round trip of set-up, not one per connection.
            await _each(conns[1:], subscribe)
            for i, conn in enumerate(conns):
                share = limit // n_conns + (1 if i < limit % n_conns else 0)
                conn.rdy = min(share, conn.max_rdy_count)
                conn.send(commands.rdy(conn.rdy))
            state["last"] = trio.current_time()
            phases.mark("connect")
            # Read until the share is in, or nothing came for read_idle_timeout, or
            # read_timeout passed (messages must be staged and FIN'd well within msgTimeout).
            deadline = trio.current_time() + options.read_timeout
            while not enough.is_set():
                now = trio.current_time()
                wake = min(deadline, state["last"] + options.read_idle_timeout)
                if now >= wake:
                    break
                with trio.move_on_at(wake):
                    await enough.wait()
            for conn in conns:
                conn.send(commands.rdy(0))
            # What arrived so far is the task's; later arrivals are REQ'd below.
            taken = {conn: list(payloads) for conn, payloads in received.items()}
            phases.mark("read")
            _fault("before-stage")
            batch = decode_payloads(
                [p for conn in conns for p in taken[conn]], part.nsqd, options.topic
            )
            batch = _drop_staged_copies(batch, part.nsqd, staging)
            batch = with_received(batch, sum(len(taken[conn]) for conn in conns))
            phases.mark("decode")
            if not staging.write(part.batch, part.index, batch):
                # Another attempt of this task staged first: its rows stand, ours go back.
                log.info("%r was staged by another attempt", part)
                _send_all(conns, received, commands.req, dict.fromkeys(conns, 0))
                staged = staging.read(part.batch, part.index)
                await _close(conns)
                return staged
            phases.mark("stage")
            if staging.committed(part.batch):
                # Claimed after the batch was committed (and its files deleted): a straggler.
                # Its rows would be read by nobody: give the messages back instead of FIN.
                log.warning("%r: staged after its batch was committed: given back", part)
                staging.discard(part.batch, part.index)
                _send_all(conns, received, commands.req, dict.fromkeys(conns, 0))
                await _close(conns)
                return pa.Table.from_batches([batch])
            _fault("after-stage")
            sent = {conn: len(taken[conn]) for conn in conns}
            for conn in conns:
                # FIN for every message taken (also the dropped copies); one join, no
                # command built per message.
                ids = [p[10:26] for p in taken[conn]]
                out = [b"FIN " + b"\nFIN ".join(ids) + b"\n"] if ids else []
                out += [commands.req(p[10:26], 0) for p in received[conn][sent[conn] :]]
                sent[conn] = len(received[conn])
                if out:
                    conn.send(b"".join(out))
            _fault("before-cls")
            # CLS is answered after everything before it: its CLOSE_WAIT confirms the FINs.
            await _each(
                conns,
                lambda conn: _answer(part, options, "CLS (the FINs)", conn.request(commands.cls())),
            )
            _send_all(conns, received, commands.req, sent)
            _fault("after-fin")
            failed = sum(conn.fin_failures for conn in conns)
            if failed:
                # Messages that timed out before their FIN come back (attempts > 1): the file
                # stays unconfirmed, so the task that receives them drops them as copies.
                log.warning(
                    "%r: %d FINs failed (msgTimeout passed): kept unconfirmed", part, failed
                )
            else:
                staging.confirm(part.batch, part.index)
            await _close(conns)
            phases.mark("fin")
            log.debug("%r: %d rows; %s", part, batch.num_rows, phases)
            return pa.Table.from_batches([batch])
        except (OSError, ClientError, trio.BrokenResourceError) as exc:
            raise RuntimeError(f"nsq source {part!r}: {exc}") from exc
        finally:
            nursery.cancel_scope.cancel()


async def _each(conns: list[Connection], step: Callable[[Connection], Awaitable[Any]]) -> None:
    """Run `step` on every connection at once; raise the first failure (not a group)."""
    failures: list[BaseException] = []

    async def run(conn: Connection) -> None:
        try:
            await step(conn)
        except (RuntimeError, OSError, ClientError, trio.BrokenResourceError) as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for conn in conns:
            nursery.start_soon(run, conn)
    if failures:
        raise failures[0]


class _Phases:
    """Where a task's time went (logged at DEBUG; bench/spark_pipeline.py reports it)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.spent: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.spent[phase] = self.spent.get(phase, 0.0) + now - self._last
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in self.spent.items())


def _refused(exc: NotConnectedError) -> bool:
    """True when no nsqd listens at the address (refused, unreachable): not when one is there
    but does not answer in time, or its TLS failed (those fail the task, which Spark retries)."""
    return not isinstance(exc, TLSError) and isinstance(exc.__cause__, OSError)


def _drop_staged_copies(batch: Any, nsqd: str, staging: StagingLog) -> Any:
    """Drop redelivered messages (attempts > 1) already staged by a task whose FINs were never
    confirmed (it crashed between staging and FIN): they are FIN'd, not returned again."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if batch.num_rows == 0 or pc.max(batch["attempts"]).as_py() <= 1:
        return batch
    ids = staging.unconfirmed_ids(nsqd)
    if not ids:
        return batch
    again = pc.and_(
        pc.greater(batch["attempts"], 1), pc.is_in(batch["id"], value_set=pa.array(list(ids)))
    )
    kept = batch.filter(pc.invert(again))
    if kept.num_rows < batch.num_rows:
        log.warning(
            "%d redelivered messages from %s were staged already: dropped",
            batch.num_rows - kept.num_rows,
            nsqd,
        )
    return kept


def _send_all(
    conns: list[Connection], received: dict[Connection, list[bytes]], command: Any, sent: Any
) -> None:
    """REQ what each connection received after `sent[conn]` messages."""
    for conn in conns:
        late = received[conn][sent[conn] :]
        sent[conn] = len(received[conn])
        if late and not conn.closed:
            try:
                conn.send(b"".join(command(p[10:26], 0) for p in late))
            except ConnectionClosedError:
                pass  # nsqd redelivers them after msgTimeout


async def _close(conns: list[Connection]) -> None:
    with trio.move_on_after(2.0):
        for conn in conns:
            await conn.flush()
    for conn in conns:
        conn.close()
