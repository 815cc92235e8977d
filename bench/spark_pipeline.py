"""Benchmark of the Spark pipeline on local Spark: topic -> Parquet archive (Trigger.AvailableNow)
and Parquet -> topic (replay) in messages per second, topic -> plain Parquet sink (no dedup), and
the latency a micro-batch adds (publish -> row in the archive, for a trickle of messages under a
processing-time trigger).

    .venv/bin/python bench/spark_pipeline.py --messages 200000 --size 100 --master 'local[2]'
    .venv/bin/python bench/spark_pipeline.py ... --reader driver   # the driver-side reader

``--reader staged`` (the default): executors read from nsqd through the staging log;
``--reader driver``: the driver-side reader (messages shipped in the partitions, no staging log).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def local_session(
    master: str, app: str, conf: dict[str, str], local_filesystem: bool = True
) -> Any:
    """A Spark session for a benchmark: Python workers that import trionsq from this checkout,
    no UI, the driver on 127.0.0.1, 2 shuffle partitions, `trionsq spark archive`'s local
    file-system settings unless `local_filesystem` is false, then `conf`."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    from trionsq.spark.pipeline import LOCAL_FILESYSTEM_CONF

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for key, value in {**(LOCAL_FILESYSTEM_CONF if local_filesystem else {}), **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-messages-per-batch", type=int, default=50_000)
    parser.add_argument("--trickle", type=int, default=20, help="messages for the latency run")
    parser.add_argument("--trickle-interval", type=float, default=0.5)
    parser.add_argument("--trigger", default="1 second", help="the latency run's trigger")
    parser.add_argument("--reader", choices=("staged", "driver"), default="staged")
    parser.add_argument("--conf", action="append", default=[], help="Spark key=value")
    parser.add_argument("--partitions", type=int, default=None, help="numPartitions")
    parser.add_argument(
        "--hadoop-defaults",
        action="store_true",
        help="without the local file-system settings trionsq spark archive applies "
        "(pipeline.LOCAL_FILESYSTEM_CONF)",
    )
    parser.add_argument(
        "--skip", default="", help="comma-separated: archive,parquet,replay,latency"
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    import trio

    from trionsq.client import Producer
    from trionsq.spark.pipeline import archive, read_archive, replay
    from trionsq.testing import DaemonProcess, pythonpath_env

    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]))
    conf = {"spark.sql.maxConcurrentOutputFileWriters": "4"}
    conf.update(pair.partition("=")[::2] for pair in args.conf)
    spark = local_session(
        args.master, "trionsq-spark-bench", conf, local_filesystem=not args.hadoop_defaults
    )
    work = tempfile.mkdtemp(prefix="trionsq-spark-bench-")
    try:
        with DaemonProcess("nsqd", ["--mem-queue-size=1000000"], env=pythonpath_env()) as nsqd:
            address = "{}:{}".format(*nsqd.tcp_address)

            async def publish(topic: str, bodies: list[bytes]) -> None:
                async with Producer(address) as producer:
                    for i in range(0, len(bodies), 2000):
                        await producer.mpub(topic, bodies[i : i + 2000])

            pad = b"x" * args.size
            bodies = [(b"%010d" % i + pad)[: args.size] for i in range(args.messages)]
            staged = args.reader == "staged"
            http = "{}:{}".format(*nsqd.http_address)
            source = dict(nsqd=[address], nsqd_http=[http], staged=staged)
            options = {
                "maxMessagesPerBatch": str(args.max_messages_per_batch),
                "availableNowIdleTimeout": "0.5s",
            }
            if args.partitions:
                options["numPartitions"] = str(args.partitions)
            # The driver-side reader waits availableNowIdleTimeout before it ends a run.
            idle = 0.0 if staged else 0.5
            print(f"reader: {args.reader}, master {args.master}, options {options}")
            # Warm-up: the first streaming query and Python workers of a session start slowly.
            trio.run(publish, "bench_warm", bodies[:1000])
            warm = archive(
                spark,
                topic="bench_warm",
                output=f"{work}/warm",
                available_now=True,
                options=options,
                **source,
            )
            warm.awaitTermination()
            replay(spark, input=f"{work}/warm", nsqd=[address], topic="bench_warm_out")

            archived = 0
            if "archive" not in skip:
                trio.run(publish, "bench_in", bodies)
                cpu = _cpu(nsqd.proc.pid)
                started = time.perf_counter()
                query = archive(
                    spark,
                    topic="bench_in",
                    output=f"{work}/archive",
                    available_now=True,
                    options=options,
                    **source,
                )
                query.awaitTermination()
                elapsed = time.perf_counter() - started - idle
                assert query.exception() is None, query.exception()
                archived = read_archive(spark, f"{work}/archive").count()
                batches = [p for p in query.recentProgress if p["numInputRows"]]
                _durations(batches)
                print(
                    f"topic -> parquet archive: {archived} messages in {elapsed:.1f}s = "
                    f"{archived / elapsed:,.0f} msg/s ({len(batches)} micro-batches); "
                    + _cpu_report(cpu, _cpu(nsqd.proc.pid), archived)
                )

            if "parquet" not in skip:
                # The source into Spark's plain Parquet file sink (no dedup, one job a batch).
                trio.run(publish, "bench_plain", bodies)
                reader = (
                    spark.readStream.format("nsq")
                    .option("topic", "bench_plain")
                    .option("channel", "plain")
                    .option("nsqd", address)
                )
                if staged:
                    reader = reader.option("nsqdHttp", http).option(
                        "stagingLocation", f"{work}/plain_ck/nsq_staging"
                    )
                for key, value in options.items():
                    reader = reader.option(key, value)
                cpu = _cpu(nsqd.proc.pid)
                started = time.perf_counter()
                query = (
                    reader.load()
                    .writeStream.format("parquet")
                    .option("path", f"{work}/plain")
                    .option("checkpointLocation", f"{work}/plain_ck")
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                elapsed = time.perf_counter() - started - idle
                assert query.exception() is None, query.exception()
                written = spark.read.parquet(f"{work}/plain").count()
                batches = [p for p in query.recentProgress if p["numInputRows"]]
                _durations(batches)
                print(
                    f"topic -> plain parquet sink: {written} messages in {elapsed:.1f}s = "
                    f"{written / elapsed:,.0f} msg/s ({len(batches)} micro-batches); "
                    + _cpu_report(cpu, _cpu(nsqd.proc.pid), written)
                )

            if "replay" not in skip and archived:
                started = time.perf_counter()
                replay(spark, input=f"{work}/archive", nsqd=[address], topic="bench_out")
                elapsed = time.perf_counter() - started
                print(
                    f"parquet -> topic: {archived} messages in {elapsed:.1f}s = "
                    f"{archived / elapsed:,.0f} msg/s"
                )

            if "stage" not in skip and staged:
                _staging_cost(args, work, address, http, publish, trio)

            if "latency" not in skip:
                _latency(spark, args, work, source, publish, trio)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _staging_cost(args: Any, work: str, address: str, http: str, publish: Any, trio: Any) -> None:
    """One task's read outside Spark (in this process): its whole time, and the part spent
    writing and fsyncing the staging file."""
    from trionsq.spark import staging
    from trionsq.spark.executor import StagedPartition, read_partition
    from trionsq.spark.options import SourceOptions

    share = args.max_messages_per_batch // (args.partitions or 2)
    pad = b"x" * args.size
    trio.run(publish, "bench_stage", [(b"%010d" % i + pad)[: args.size] for i in range(share)])
    options = SourceOptions.parse(
        {
            "topic": "bench_stage",
            "channel": "c",
            "nsqd": address,
            "nsqdHttp": http,
            "stagingLocation": f"{work}/stage",
        }
    )
    from trionsq.spark.planner import Planner

    Planner(options).depths()  # creates the channel
    spent = [0.0]
    write = staging.StagingLog.write

    def timed(self: Any, *a: Any) -> bool:
        t = time.perf_counter()
        try:
            return write(self, *a)
        finally:
            spent[0] += time.perf_counter() - t

    staging.StagingLog.write = timed  # type: ignore[method-assign]
    phases: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: phases.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("trionsq.spark")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        started = time.perf_counter()
        rows = sum(
            b.num_rows for b in read_partition(StagedPartition(1, 0, address, share), options)
        )
        total = time.perf_counter() - started
    finally:
        staging.StagingLog.write = write  # type: ignore[method-assign]
        logger.removeHandler(handler)
    print(
        f"staging log: one task reading {rows} messages (outside Spark): {total * 1000:.0f} ms, "
        f"of which staging (Arrow IPC write + fsync + link + dir fsync) {spent[0] * 1000:.0f} ms "
        f"({spent[0] / total:.0%}); the task's phases: {phases[-1].split('; ', 1)[-1]}"
    )


def _latency(spark: Any, args: Any, work: str, source: Any, publish: Any, trio: Any) -> None:
    """A trickle under a processing-time trigger: publish -> end of the batch archiving it."""
    from trionsq.spark.pipeline import archive

    query = archive(
        spark,
        topic="bench_trickle",
        output=f"{work}/trickle",
        trigger=args.trigger,
        **source,
    )
    time.sleep(5)  # the query's first (empty) batches
    sent: list[float] = []
    for i in range(args.trickle):
        sent.append(time.time())
        trio.run(publish, "bench_trickle", [b"trickle %d" % i])
        time.sleep(args.trickle_interval)
    deadline = time.monotonic() + 60
    while sum(p["numInputRows"] for p in query.recentProgress) < args.trickle:
        assert time.monotonic() < deadline, "the trickle was not archived"
        time.sleep(0.1)
    time.sleep(1)
    query.stop()
    ends: list[tuple[float, int]] = []
    overhead: list[float] = []
    for p in query.recentProgress:
        if not p["numInputRows"]:
            continue
        start = _parse(p["timestamp"])
        ends.append((start + p["durationMs"]["triggerExecution"] / 1000, p["numInputRows"]))
        overhead.append(p["durationMs"]["triggerExecution"] / 1000)
    latencies = []
    k = 0
    for end, n in ends:
        for _ in range(n):
            if k < len(sent):
                latencies.append(end - sent[k])
            k += 1
    latencies.sort()
    print(
        f"latency publish -> archived row ({len(latencies)} messages, trigger {args.trigger}): "
        f"p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms; "
        f"micro-batch duration p50 {statistics.median(overhead) * 1000:.0f} ms"
    )


def _cpu(nsqd_pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by this process's tree: (everything but the
    nsqd, the nsqd). The machine is shared: CPU time per message is the steadier figure."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the name: state, ppid, ... utime (12th), stime, cutime, cstime (15th).
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = sum(int(x) for x in fields[11:15]) / tick

    def under(pid: int, root: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parent.get(pid, 0)
        return False

    me = os.getpid()
    spark = sum(t for pid, t in used.items() if under(pid, me) and not under(pid, nsqd_pid))
    nsqd = sum(t for pid, t in used.items() if under(pid, nsqd_pid))
    return spark, nsqd


def _cpu_report(before: tuple[float, float], after: tuple[float, float], n: int) -> str:
    spark, nsqd = after[0] - before[0], after[1] - before[1]
    return (
        f"CPU {spark:.1f}s Spark (driver, JVM, Python workers) + {nsqd:.1f}s nsqd = "
        f"{spark * 1e6 / max(n, 1):.1f} + {nsqd * 1e6 / max(n, 1):.1f} us/msg"
    )


def _durations(batches: list[Any]) -> None:
    steady = batches[3:]
    if steady:
        rows = sum(p["numInputRows"] for p in steady)
        took = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
        print(
            f"  from the 4th micro-batch on (the JVM warmed up): {rows} rows in {took:.1f}s of "
            f"micro-batches = {rows / took:,.0f} msg/s"
        )
    for p in batches:
        d = p["durationMs"]
        print(
            f"  batch {p['batchId']}: {p['numInputRows']} rows, "
            + ", ".join(f"{k} {v}" for k, v in sorted(d.items()) if v >= 20)
        )


def _parse(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    sys.exit(main())
