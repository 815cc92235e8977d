"""Fixtures of the Spark tests: one local[2] SparkSession on loopback for the whole run (with the
``nsq`` data source registered), real trionsq nsqd / nsqlookupd subprocesses on port 0, and
helpers to publish, consume and read nsqd's channel stats."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")

from trionsq.testing import DaemonProcess, pythonpath_env  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's Python workers import trionsq from this checkout (not an installed copy).
    os.environ["PYTHONPATH"] = pythonpath_env()["PYTHONPATH"]
    from pyspark.sql import SparkSession

    import trionsq.spark

    warehouse = tempfile.mkdtemp(prefix="trionsq-spark-warehouse-")
    # Fault injection for the staged source's kill tests (trionsq.spark.executor._fault).
    os.environ["TRIONSQ_SPARK_FAULTS"] = os.path.join(warehouse, "faults")
    os.makedirs(os.environ["TRIONSQ_SPARK_FAULTS"])
    session = (
        # Two cores, and a failed task is tried up to 4 times (as on a cluster; plain
        # local[2] never retries a task).
        SparkSession.builder.master("local[2,4]")
        .appName("trionsq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "20s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    trionsq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        shutil.rmtree(warehouse, ignore_errors=True)
        os.environ.pop("TRIONSQ_SPARK_FAULTS", None)


def fault(point: str) -> None:
    """Make the next staged-source task reaching `point` kill its Python worker."""
    with open(os.path.join(os.environ["TRIONSQ_SPARK_FAULTS"], point), "w"):
        pass


def faults_left() -> list[str]:
    return sorted(os.listdir(os.environ["TRIONSQ_SPARK_FAULTS"]))


@pytest.fixture
def tmp_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="trionsq-spark-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nsqd() -> Iterator[DaemonProcess]:
    with DaemonProcess("nsqd", env=pythonpath_env()) as daemon:
        yield daemon


def tcp(daemon: DaemonProcess) -> str:
    host, port = daemon.tcp_address
    return f"{host}:{port}"


def http(daemon: DaemonProcess) -> str:
    address = daemon.http_address
    assert address is not None
    return f"{address[0]}:{address[1]}"


def channel_stats(daemon: DaemonProcess, topic: str, channel: str) -> dict[str, Any]:
    """nsqd's /stats entry for `topic`/`channel` (empty if it does not exist)."""
    url = f"http://{http(daemon)}/stats?format=json&topic={topic}"
    with urllib.request.urlopen(url, timeout=5) as response:
        stats = json.load(response)
    for t in stats.get("topics", []):
        if t["topic_name"] == topic:
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    return dict(c)
    return {}


def topic_count(daemon: DaemonProcess, topic: str) -> int:
    url = f"http://{http(daemon)}/stats?format=json&topic={topic}"
    with urllib.request.urlopen(url, timeout=5) as response:
        stats = json.load(response)
    return sum(t["message_count"] for t in stats.get("topics", []) if t["topic_name"] == topic)


def publish(daemon: DaemonProcess, topic: str, bodies: list[bytes]) -> None:
    """MPUB `bodies` (in batches of 500) with trionsq.client."""
    import trio

    from trionsq.client import Producer

    async def run() -> None:
        async with Producer(tcp(daemon)) as producer:
            for i in range(0, len(bodies), 500):
                await producer.mpub(topic, bodies[i : i + 500])

    trio.run(run)


def consume(daemon: DaemonProcess, topic: str, n: int, timeout: float = 20.0) -> list[bytes]:
    """Read (and FIN) `n` messages of `topic` on a fresh channel; fewer if `timeout` passes."""
    import trio

    from trionsq.client import Consumer

    bodies: list[bytes] = []

    async def run() -> None:
        async with Consumer(
            topic, "check", nsqd_tcp_addresses=[tcp(daemon)], max_in_flight=500
        ) as consumer:
            with trio.move_on_after(timeout):
                async for message in consumer:
                    bodies.append(message.body)
                    message.finish()
                    if len(bodies) >= n:
                        break

    trio.run(run)
    return bodies
