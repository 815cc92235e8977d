"""The most Spark allows a Python source here: the archive's write path fed by a no-op source.

The `nsq_ceiling` source below hands Spark ready-made Arrow batches of the nsq source's schema
(built once per Python worker, then reused): no nsqd, no staging, no decoding. Run through the
same `archive` write path (`foreachBatch` appending Parquet partitioned by date, the LOCAL_
FILESYSTEM_CONF settings) and the same batch size and partition count as `spark_pipeline.py`,
its rate is the most any source can reach on this machine and Spark build: the fixed cost per
micro-batch (planning, the offset and commit logs, the job, the Python worker hand-off, the
Parquet write and commit) with nothing of trionsq's in it. With --nsq the real staged source
runs in the same session, rounds alternating, for the ratio.

    .venv/bin/python bench/spark_ceiling.py --messages 750000 --master 'local[2]' --rounds 2 --nsq
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spark_pipeline import _durations, local_session

_TABLES: dict[tuple[int, int], Any] = {}


def _table(rows: int, size: int) -> Any:
    """One partition's rows as Arrow, made once per worker process (the source costs ~0)."""
    key = (rows, size)
    if key not in _TABLES:
        import pyarrow as pa

        from trionsq.spark.executor import _schema

        now = time.time_ns() // 1000
        pad = b"x" * size
        columns = [
            pa.array([(b"%010d" % i + pad)[:size] for i in range(rows)], pa.binary()),
            pa.array([f"{i:016x}" for i in range(rows)], pa.string()),
            pa.array([now + i for i in range(rows)], pa.timestamp("us", tz="UTC")),
            pa.array([1] * rows, pa.int32()),
            pa.array(["127.0.0.1:4150"] * rows, pa.string()),
            pa.array(["bench"] * rows, pa.string()),
        ]
        _TABLES[key] = pa.RecordBatch.from_arrays(columns, schema=_schema())
    return _TABLES[key]


def _source_class() -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

    from trionsq.spark.source import SOURCE_SCHEMA

    class Part(InputPartition):
        def __init__(self, rows: int, size: int) -> None:
            self.rows, self.size = rows, size

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]) -> None:
            self.total = int(options["messages"])
            self.per_batch = int(options["maxMessagesPerBatch"])
            self.parts = int(options.get("numPartitions", "2"))
            self.size = int(options.get("size", "100"))

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(self.per_batch)

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"n": min(self.total, start["n"] + self.per_batch)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[Any]:
            n = end["n"] - start["n"]
            if n <= 0:
                return []
            share = -(-n // self.parts)
            return [Part(min(share, n - i), self.size) for i in range(0, n, share)]

        def read(self, partition: Any) -> Iterator[Any]:
            yield _table(partition.rows, partition.size)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "nsq_ceiling"

        def schema(self) -> Any:
            return SOURCE_SCHEMA

        def streamReader(self, schema: Any) -> Any:
            return Reader(self.options)

    return CeilingSource


def _run(spark: Any, reader: Any, work: str, name: str, expected: int) -> float:
    """One archive run of `reader` (a DataStreamReader) into a fresh output; returns msg/s."""
    from trionsq.spark.pipeline import archive_batch, read_archive

    output, checkpoint = f"{work}/{name}", f"{work}/{name}_ck"
    started = time.perf_counter()
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda df, i: archive_batch(df, i, output, dedup=False))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    assert query.exception() is None, query.exception()
    got = read_archive(spark, output).count()
    assert got == expected, (got, expected)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    print(f"{name}: {got} rows in {elapsed:.1f}s = {got / elapsed:,.0f} msg/s ({len(batches)} b.)")
    _durations(batches)
    return got / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=750_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-messages-per-batch", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--nsq", action="store_true", help="also the staged nsq source, alternating"
    )
    args = parser.parse_args()

    import trio

    from trionsq.client import Producer
    from trionsq.spark import register
    from trionsq.testing import DaemonProcess, pythonpath_env

    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]))
    spark = local_session(args.master, "trionsq-spark-ceiling", {})
    spark.dataSource.register(_source_class())
    register(spark)
    work = tempfile.mkdtemp(prefix="trionsq-spark-ceiling-")
    per_batch = str(args.max_messages_per_batch)

    def ceiling(messages: int) -> Any:
        return (
            spark.readStream.format("nsq_ceiling")
            .option("messages", str(messages))
            .option("maxMessagesPerBatch", per_batch)
            .option("numPartitions", str(args.partitions))
            .option("size", str(args.size))
        )

    try:
        with DaemonProcess("nsqd", ["--mem-queue-size=1000000"], env=pythonpath_env()) as nsqd:
            address = "{}:{}".format(*nsqd.tcp_address)
            http = "{}:{}".format(*nsqd.http_address)
            pad = b"x" * args.size
            bodies = [(b"%010d" % i + pad)[: args.size] for i in range(args.messages)]

            async def publish(topic: str, n: int) -> None:
                async with Producer(address) as producer:
                    for i in range(0, n, 2000):
                        await producer.mpub(topic, bodies[i : min(n, i + 2000)])

            def nsq(topic: str) -> Any:
                return (
                    spark.readStream.format("nsq")
                    .option("topic", topic)
                    .option("channel", "archive")
                    .option("nsqd", address)
                    .option("nsqdHttp", http)
                    .option("stagingLocation", f"{work}/{topic}_staging")
                    .option("maxMessagesPerBatch", per_batch)
                    .option("numPartitions", str(args.partitions))
                    .option("availableNowIdleTimeout", "0.5s")
                )

            # Warm-up: the session's first queries and Python workers start slowly.
            _run(
                spark,
                ceiling(2 * args.max_messages_per_batch),
                work,
                "warm_ceiling",
                2 * args.max_messages_per_batch,
            )
            if args.nsq:
                trio.run(publish, "warm", 1000)
                _run(spark, nsq("warm"), work, "warm_nsq", 1000)
            rates: dict[str, list[float]] = {"ceiling": [], "nsq": []}
            for r in range(args.rounds):
                rates["ceiling"].append(
                    _run(spark, ceiling(args.messages), work, f"ceiling{r}", args.messages)
                )
                if args.nsq:
                    trio.run(publish, f"nsq{r}", args.messages)
                    rates["nsq"].append(_run(spark, nsq(f"nsq{r}"), work, f"nsq{r}", args.messages))
            for name, got in rates.items():
                if got:
                    print(f"{name}: " + ", ".join(f"{x:,.0f}" for x in got) + " msg/s (whole runs)")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
