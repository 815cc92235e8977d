"""The streaming source: ``spark.readStream.format("nsq")``, two readers.

`NSQStagedStreamReader` (option ``stagingLocation``): the driver plans each micro-batch from
nsqd's /stats (`planner`) without touching a message; executor tasks read from nsqd, stage what
they took in the write-ahead log, FIN it and return it (`executor`, `staging`). Exactly once.

`NSQStreamReader` (the driver-side reader, without ``stagingLocation``): its planning methods
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``) run in one long-lived
driver-side Python process per query run; it starts a `ReaderRuntime` there on first use.
Offsets are ``{"session": <uuid>, "seq": n}``: the reader session and the number of messages it
received before the offset. A batch's messages travel to the executors inside its
`NSQInputPartition` objects; `read` only decodes them. Messages are FIN'd in ``commit``, i.e.
after Spark committed the batch holding them. At-least-once.
"""

from __future__ import annotations

import logging
import math
import os
import struct
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .executor import StagedPartition, read_partition, received
from .options import SourceOptions
from .planner import NsqdDepth, Planner, split_plan
from .runtime import ReaderRuntime
from .staging import StagingLog

__all__ = [
    "SOURCE_SCHEMA",
    "NSQInputPartition",
    "NSQStagedStreamReader",
    "NSQStreamReader",
    "decode_partition",
]

log = logging.getLogger("trionsq.spark")

#: The rows the source produces. ``id`` is NSQ's 16-character hex message ID; ``nsqd`` the
#: TCP address of the nsqd that delivered the message; (nsqd, id) identifies a message.
SOURCE_SCHEMA = StructType(
    [
        StructField("body", BinaryType(), False),
        StructField("id", StringType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("attempts", IntegerType(), False),
        StructField("nsqd", StringType(), False),
        StructField("topic", StringType(), False),
    ]
)

_HEADER = struct.Struct(">qH16s")


class NSQInputPartition(InputPartition):
    """One task's share of a micro-batch: the messages themselves (wire payloads: timestamp,
    attempts, id, body) and, per message, the index of its nsqd in `nsqds`."""

    def __init__(self, topic: str, payloads: list[bytes], nsqds: list[str], index: list[int]):
        super().__init__(len(payloads))
        self.topic = topic
        self.payloads = payloads
        self.nsqds = nsqds
        self.index = index


def decode_partition(partition: NSQInputPartition) -> Any:
    """The partition's messages as one Arrow RecordBatch in `SOURCE_SCHEMA`'s layout."""
    import pyarrow as pa

    bodies: list[bytes] = []
    ids: list[str] = []
    stamps: list[int] = []
    attempts: list[int] = []
    unpack = _HEADER.unpack_from
    for payload in partition.payloads:
        ts, att, mid = unpack(payload)
        bodies.append(payload[26:])
        ids.append(mid.decode("ascii"))
        stamps.append(ts // 1000)
        attempts.append(att)
    n = len(bodies)
    nsqd = pa.DictionaryArray.from_arrays(
        pa.array(partition.index, pa.int32()), pa.array(partition.nsqds, pa.string())
    ).cast(pa.string())
    schema = pa.schema(
        [
            pa.field("body", pa.binary(), False),
            pa.field("id", pa.string(), False),
            pa.field("timestamp", pa.timestamp("us", tz="UTC"), False),
            pa.field("attempts", pa.int32(), False),
            pa.field("nsqd", pa.string(), False),
            pa.field("topic", pa.string(), False),
        ]
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(bodies, pa.binary()),
            pa.array(ids, pa.string()),
            pa.array(stamps, pa.timestamp("us", tz="UTC")),
            pa.array(attempts, pa.int32()),
            nsqd,
            pa.array([partition.topic] * n, pa.string()),
        ],
        schema=schema,
    )


def _split(topic: str, payloads: list[bytes], nsqds: list[str], parts: int) -> list[Any]:
    names = sorted(set(nsqds))
    position = {name: i for i, name in enumerate(names)}
    index = [position[name] for name in nsqds]
    n = len(payloads)
    parts = max(1, min(parts, n))
    size = -(-n // parts)
    return [
        NSQInputPartition(topic, payloads[i : i + size], names, index[i : i + size])
        for i in range(0, n, size)
    ]


class NSQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader; see the module docstring and docs/spark.md for the guarantees."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.session = uuid.uuid4().hex
        self._runtime: ReaderRuntime | None = None
        self._available_now = False

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to executors for `read`: the runtime (a thread, sockets) stays here.
        state = dict(self.__dict__)
        state["_runtime"] = None
        return state

    def _rt(self) -> ReaderRuntime:
        if self._runtime is None:
            self._runtime = ReaderRuntime(self.options, self.session)
            self._runtime.start()
            log.info("NSQ reader session %s started", self.session)
        return self._runtime

    def _seq(self, offset: dict[str, Any]) -> int:
        """Where `offset` is in this session: a previous session's offset is our start."""
        return int(offset["seq"]) if offset.get("session") == self.session else 0

    def initialOffset(self) -> dict[str, Any]:
        self._rt()
        return {"session": self.session, "seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_messages_per_batch)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        seq = self._seq(start)
        max_rows: int | None = None
        if isinstance(limit, ReadMaxRows):
            max_rows = max(1, int(limit.max_rows))
        elif not isinstance(limit, ReadAllAvailable):
            max_rows = self.options.max_messages_per_batch
        end = self._rt().plan(seq, max_rows, wait=self._available_now)
        if end == seq and start.get("session") != self.session:
            return start  # nothing new yet: keep the previous run's offset
        return {"session": self.session, "seq": end}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if self._runtime is None:
            return None
        return {"session": self.session, "seq": self._runtime.received()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        self._rt().prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[Any]:
        if end.get("session") != self.session:
            # A batch planned by an earlier run that crashed before committing it: its
            # messages were never FIN'd, so nsqd delivers them again to this session.
            log.info("batch %s..%s is from an earlier reader session: empty", start, end)
            return []
        lo, hi = self._seq(start), int(end["seq"])
        if hi <= lo:
            return []
        batch = self._rt().slice(lo, hi)
        return _split(self.options.topic, batch.payloads, batch.nsqd, self.options.num_partitions)

    def read(self, partition: Any) -> Iterator[Any]:
        if partition.payloads:
            yield decode_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        if end.get("session") != self.session or self._runtime is None:
            return  # an earlier run's messages: nsqd redelivers them (we cannot FIN them)
        self._runtime.finish(int(end["seq"]))

    def stop(self) -> None:
        if self._runtime is not None:
            self._runtime.stop()
            self._runtime = None


class NSQStagedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The executor-side source (option ``stagingLocation``): the driver plans batches from
    nsqd's /stats without touching a message; each task reads its share from its nsqd, stages
    it in the write-ahead log, FINs it and returns it (`executor.read_partition`). Offsets are
    ``{"log": id, "batch": n, "plan": [[nsqd, limit], ...]}``: the batch number and its
    partitions, so a re-run of batch n after a restart has the same partitions and reads their
    staging files; ``log`` names the query's staging directory (made when the query's first
    offset is, and kept in its offset log), so a new checkpoint never reads an old one's files."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: Planner | None = None
        self._available_now = False
        #: Trigger.AvailableNow: the most batches this run may still plan (None: not set yet).
        self._budget: int | None = None
        #: nsqds without /stats seen empty in this AvailableNow run (their last batch read 0).
        self._drained: set[str] = set()
        #: The batch this AvailableNow run started after (None: not planned from yet).
        self._run_after: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    def _plan_source(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        return {"log": uuid.uuid4().hex, "batch": 0, "plan": []}

    def _log(self, offset: dict[str, Any]) -> StagingLog:
        return StagingLog(os.path.join(self.options.staging_location, str(offset.get("log", ""))))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        self._budget = None
        self._drained = set()
        self._run_after = None

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        max_rows = self.options.max_messages_per_batch
        batch = int(start.get("batch", 0))
        depths = self._depths(start)
        if isinstance(limit, ReadMaxRows):
            max_rows = max(1, int(limit.max_rows))
        elif isinstance(limit, ReadAllAvailable):
            # Everything /stats shows; maxMessagesPerBatch from an nsqd of unknown depth (a
            # task's RDY, and its connections, follow its limit: no unbounded share).
            max_rows = max(
                1,
                sum(d.depth if d.depth is not None else max_rows for d in depths),
            )
        if self._available_now:
            if self._budget is None and all(d.depth is not None for d in depths):
                known = sum(d.depth or 0 for d in depths)
                # What waits now, plus two batches (for messages coming back from in flight):
                # a publisher that never stops does not keep the run going. (With an nsqd of
                # unknown depth the run ends when a batch reads nothing from it.)
                self._budget = math.ceil(known / max_rows) + 2
            if self._budget is not None and self._budget <= 0:
                return start
        plan = split_plan(depths, max_rows, self.options.num_partitions)
        if not plan:
            return start
        if self._budget is not None:
            self._budget -= 1
        return {"log": start.get("log", ""), "batch": batch + 1, "plan": plan}

    def _depths(self, start: dict[str, Any]) -> list[NsqdDepth]:
        planner = self._plan_source()
        if not self._available_now:
            return planner.depths()
        # An nsqd without /stats is drained once a batch of this run read nothing from it:
        # not one planned before the run (the last of an earlier run that ended so, or re-run
        # after a restart), or a run after one that drained would read nothing, ever.
        last = int(start.get("batch", 0))
        if self._run_after is None:
            self._run_after = last
        if last > self._run_after:
            staging = self._log(start)
            got: dict[str, int] = {}
            for i, (nsqd, _) in enumerate(start.get("plan") or []):
                table = staging.read(last, i)
                # Received, not rows: a batch whose messages were all dropped copies (a
                # killed run's, coming back) did not find the nsqd drained.
                got[nsqd] = got.get(nsqd, 0) + (received(table) if table is not None else 1)
            self._drained |= {n for n, rows in got.items() if rows == 0}

        def known() -> list[NsqdDepth]:
            depths = planner.depths()
            for d in depths:
                if d.depth is None and d.tcp in self._drained:
                    d.depth = 0
            return depths

        depths = known()
        # Nothing waiting but messages in flight elsewhere (a killed run's): give them
        # availableNowIdleTimeout to come back before the run ends.
        deadline = time.monotonic() + self.options.available_now_idle
        while (
            all(d.depth == 0 for d in depths)
            and any(d.in_flight for d in depths)
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
            depths = known()
        return depths

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[Any]:
        batch = int(end.get("batch", 0))
        if batch == int(start.get("batch", 0)):
            return []
        return [
            StagedPartition(batch, i, nsqd, int(limit), str(end.get("log", "")))
            for i, (nsqd, limit) in enumerate(end.get("plan") or [])
        ]

    def read(self, partition: Any) -> Iterator[Any]:
        yield from read_partition(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        self._log(end).commit(int(end.get("batch", 0)))

    def stop(self) -> None:
        pass  # no connections between tasks
