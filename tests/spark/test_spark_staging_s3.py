"""The staged source with its staging log on S3 (moto's S3 server on 127.0.0.1), end to end
through Spark: exactly the published set, each task's file claimed with a conditional PUT and
committed batches' objects deleted; the archive job with an explicit S3 ``stagingLocation`` (it
wins over ``<checkpoint>/nsq_staging``) and a task killed between staging and FIN has every
message once. The Python workers find the server through boto3's standard chain
(``AWS_ENDPOINT_URL``...), given to them as the data source's environment."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

import trionsq.spark
from trionsq.spark.pipeline import archive, read_archive
from trionsq.testing import DaemonProcess

from .conftest import channel_stats, fault, faults_left, http, publish, tcp
from .s3server import S3Server, put_requests
from .test_spark_staged import _stream, driver_killed_then_restarted

_BATCH_KEY = re.compile(r"/b(\d+)/p\d+\.(arrow|fin)$")


@pytest.fixture
def s3(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """The S3 server, its endpoint and credentials in this process's environment and in the
    one Spark gives the data source's Python workers (the ``nsq`` source is registered again:
    a Python function carries the SparkContext's environment as it was when it was made)."""
    sc = spark.sparkContext
    saved = dict(sc.environment)
    with S3Server() as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        sc.environment.update(server.env)
        trionsq.spark.register(spark)
        try:
            yield server
        finally:
            sc.environment.clear()
            sc.environment.update(saved)
            trionsq.spark.register(spark)


def _batches(keys: list[str]) -> set[int]:
    return {int(m.group(1)) for k in keys if (m := _BATCH_KEY.search("/" + k))}


def test_staged_source_on_s3_reads_exactly_the_published_set(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str, s3: S3Server
) -> None:
    bodies = [f"s3 staged {i}".encode() for i in range(1500)]
    publish(nsqd, "s3_exact", bodies)
    bucket = s3.new_bucket()
    stream = _stream(
        spark,
        "s3_exact",
        f"s3://{bucket}/ck/nsq_staging",
        nsqd=tcp(nsqd),
        nsqdHttp=http(nsqd),
        maxMessagesPerBatch="400",
    )
    rows: list[Any] = []
    query = (
        stream.writeStream.foreachBatch(lambda df, _: rows.extend(df.collect()))
        .option("checkpointLocation", f"{tmp_dir}/ck")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "Trigger.AvailableNow did not stop"
    assert query.exception() is None
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert {r.attempts for r in rows} == {1}
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 400 and sum(sizes) == 1500
    stats = channel_stats(nsqd, "s3_exact", "spark")
    assert stats["depth"] == 0 and stats["in_flight_count"] == 0
    assert stats["timeout_count"] == 0
    # Every task claimed its staging object with one conditional PUT.
    claims = [
        (path, match)
        for path, match in put_requests(s3.requests)
        if path.startswith(f"/{bucket}/") and path.endswith(".arrow")
    ]
    assert claims and all(match == "*" for _, match in claims)
    assert len(_batches([path for path, _ in claims])) == len(sizes)
    # Committed batches' objects are deleted (the last batch waits for the next commit).
    keys = s3.keys(bucket)
    assert keys and all(k.startswith("ck/nsq_staging/") for k in keys)
    assert len(_batches(keys)) <= 1
    assert not [k for k in keys if "/unconfirmed/" in k]
    assert not os.path.exists(f"{tmp_dir}/ck/nsq_staging")


def test_task_killed_between_staging_and_fin_archive_on_s3_has_every_message_once(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str, s3: S3Server
) -> None:
    """The archive job with a local checkpoint and an explicit S3 stagingLocation (it wins over
    <checkpoint>/nsq_staging); a task's Python worker dies after staging, before FIN."""
    bodies = [f"s3 arch kill {i}".encode() for i in range(1000)]
    publish(nsqd, "s3_arch_kill", bodies)
    bucket = s3.new_bucket()
    fault("after-stage")
    out = f"{tmp_dir}/archive"
    query = archive(
        spark,
        topic="s3_arch_kill",
        nsqd=[tcp(nsqd)],
        nsqd_http=[http(nsqd)],
        output=out,
        available_now=True,
        options={
            "maxMessagesPerBatch": "300",
            "msgTimeout": "1s",
            "availableNowIdleTimeout": "3s",
            "stagingLocation": f"s3://{bucket}/archive/nsq_staging",
        },
    )
    assert query.awaitTermination(120) and query.exception() is None
    assert faults_left() == []  # the task was killed, and retried
    rows = read_archive(spark, out).collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    stats = channel_stats(nsqd, "s3_arch_kill", "nsq_archive")  # the archive's channel
    assert stats["depth"] == 0 and stats["in_flight_count"] == 0
    # The killed task's messages came back from nsqd and were dropped as staged already.
    assert stats["timeout_count"] > 0
    assert not os.path.exists(f"{out}/_checkpoint/nsq_staging")
    keys = s3.keys(bucket)
    assert keys and all(k.startswith("archive/nsq_staging/") for k in keys)
    # Its staging object was kept as unconfirmed when its batch committed; the other
    # committed batches' objects are gone.
    assert [k for k in keys if "/unconfirmed/" in k]
    assert len(_batches(keys)) <= 1


def test_driver_sigkilled_mid_run_then_restarted_with_s3_staging_has_every_message_once(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str, s3: S3Server
) -> None:
    """The driver-kill round of the POSIX store (a driver process and its JVM SIGKILLed
    mid-run, the query restarted from its checkpoint, a plain Parquet sink) with the staging
    log on S3: every message once. The killed driver reaches the server through the same
    AWS_* environment."""
    bucket = s3.new_bucket()
    driver_killed_then_restarted(spark, nsqd, tmp_dir, "s3_driver", f"s3://{bucket}/staging")
    keys = s3.keys(bucket)
    assert keys and all(k.startswith("staging/") for k in keys)
