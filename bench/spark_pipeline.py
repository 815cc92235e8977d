"""Benchmark of the Spark pipeline on local Spark: topic -> Parquet archive (Trigger.AvailableNow)
and Parquet -> topic (replay) in messages per second, and the latency a micro-batch adds
(publish -> row in the archive, for a trickle of messages under a 0-second trigger).

    .venv/bin/python bench/spark_pipeline.py --messages 200000 --size 100 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-messages-per-batch", type=int, default=50_000)
    parser.add_argument("--trickle", type=int, default=20, help="messages for the latency run")
    parser.add_argument("--trickle-interval", type=float, default=0.5)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable

    import trio
    from pyspark.sql import SparkSession

    from trionsq.client import Producer
    from trionsq.spark.pipeline import archive, read_archive, replay
    from trionsq.testing import DaemonProcess, pythonpath_env

    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]))
    spark = (
        SparkSession.builder.master(args.master)
        .appName("trionsq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
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
            trio.run(publish, "bench_in", bodies)
            # Warm-up: the first streaming query and Python workers of a session start slowly.
            trio.run(publish, "bench_warm", bodies[:1000])
            warm = archive(
                spark,
                topic="bench_warm",
                nsqd=[address],
                output=f"{work}/warm",
                available_now=True,
                options={"availableNowIdleTimeout": "0.5s"},
            )
            warm.awaitTermination()
            replay(spark, input=f"{work}/warm", nsqd=[address], topic="bench_warm_out")

            options = {
                "maxMessagesPerBatch": str(args.max_messages_per_batch),
                "availableNowIdleTimeout": "0.5s",
            }
            started = time.perf_counter()
            query = archive(
                spark,
                topic="bench_in",
                nsqd=[address],
                output=f"{work}/archive",
                available_now=True,
                options=options,
            )
            query.awaitTermination()
            elapsed = time.perf_counter() - started - 0.5  # minus the final idle wait
            assert query.exception() is None, query.exception()
            archived = read_archive(spark, f"{work}/archive").count()
            batches = [p for p in query.recentProgress if p["numInputRows"]]
            print(
                f"topic -> parquet: {archived} messages in {elapsed:.1f}s = "
                f"{archived / elapsed:,.0f} msg/s ({len(batches)} micro-batches)"
            )

            started = time.perf_counter()
            replay(spark, input=f"{work}/archive", nsqd=[address], topic="bench_out")
            elapsed = time.perf_counter() - started
            print(
                f"parquet -> topic: {archived} messages in {elapsed:.1f}s = "
                f"{archived / elapsed:,.0f} msg/s"
            )

            # Latency: a trickle under a 0-second trigger.
            query = archive(
                spark,
                topic="bench_trickle",
                nsqd=[address],
                output=f"{work}/trickle",
                trigger="0 seconds",
            )
            sent: list[float] = []
            for i in range(args.trickle):
                sent.append(time.time())
                trio.run(publish, "bench_trickle", [b"trickle %d" % i])
                time.sleep(args.trickle_interval)
            deadline = time.monotonic() + 30
            while sum(p["numInputRows"] for p in query.recentProgress) < args.trickle:
                assert time.monotonic() < deadline
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
                f"latency publish -> archived row ({len(latencies)} messages, 0s trigger): "
                f"p50 {statistics.median(latencies) * 1000:.0f} ms, "
                f"max {latencies[-1] * 1000:.0f} ms; "
                f"micro-batch duration p50 {statistics.median(overhead) * 1000:.0f} ms"
            )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _parse(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    sys.exit(main())
