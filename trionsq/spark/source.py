"""The streaming source: ``spark.readStream.format("nsq")``.

`NSQStreamReader`'s planning methods (``initialOffset``, ``latestOffset``, ``partitions``,
``commit``) run in one long-lived driver-side Python process per query run; it starts a
`ReaderRuntime` there on first use. Offsets are ``{"session": <uuid>, "seq": n}``: the reader
session and the number of messages it received before the offset. A batch's messages travel to
the executors inside its `NSQInputPartition` objects; `read` only decodes them. Messages are
FIN'd in ``commit``, i.e. after Spark committed the batch holding them.
"""

from __future__ import annotations

import logging
import struct
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

from .options import SourceOptions
from .runtime import ReaderRuntime

__all__ = ["SOURCE_SCHEMA", "NSQInputPartition", "NSQStreamReader", "decode_partition"]

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
