"""The ``nsq`` streaming source: exactly the published set, read limits, Trigger.AvailableNow,
lookupd discovery, and a slow batch kept alive by TOUCH (no redelivery)."""

from __future__ import annotations

import time
from typing import Any

from trionsq.testing import DaemonProcess, pythonpath_env

from .conftest import channel_stats, http, publish, tcp


def _stream(spark: Any, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("nsq").option("topic", topic).option("channel", "spark")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run_available_now(
    spark: Any, stream: Any, checkpoint: str, name: str
) -> tuple[Any, list[Any]]:
    """Run `stream` with Trigger.AvailableNow into a list (foreachBatch: restartable)."""
    rows: list[Any] = []
    query = (
        stream.writeStream.foreachBatch(lambda df, _: rows.extend(df.collect()))
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90), "Trigger.AvailableNow did not stop"
    assert query.exception() is None
    return query, rows


def test_source_reads_exactly_the_published_set(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    bodies = [f"src {i}".encode() for i in range(1500)]
    publish(nsqd, "src_exact", bodies)
    stream = _stream(spark, "src_exact", nsqd=tcp(nsqd))
    _, rows = _run_available_now(spark, stream, f"{tmp_dir}/ck", "src_exact")
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert len({r.id for r in rows}) == len(bodies)
    assert {r.nsqd for r in rows} == {tcp(nsqd)}
    assert {r.topic for r in rows} == {"src_exact"}
    assert {r.attempts for r in rows} == {1}
    assert all(len(r.id) == 16 and r.timestamp.year >= 2024 for r in rows)
    # Everything was delivered once; all but the last batch is FIN'd (its commit comes
    # only when a later run plans its next batch).
    stats = channel_stats(nsqd, "src_exact", "spark")
    assert stats["timeout_count"] == 0 and stats["requeue_count"] == 0
    assert stats["depth"] == 0


def test_read_limit_gives_several_batches(spark: Any, nsqd: DaemonProcess, tmp_dir: str) -> None:
    publish(nsqd, "src_limit", [f"l{i}".encode() for i in range(450)])
    stream = _stream(spark, "src_limit", nsqd=tcp(nsqd), maxMessagesPerBatch="100")
    query, rows = _run_available_now(spark, stream, f"{tmp_dir}/ck", "src_limit")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(rows) == 450
    assert max(sizes) <= 100 and len(sizes) >= 5
    assert sum(sizes) == 450


def test_available_now_stops_and_leaves_later_messages(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    publish(nsqd, "src_now", [f"n{i}".encode() for i in range(200)])
    stream = _stream(spark, "src_now", nsqd=tcp(nsqd), availableNowIdleTimeout="1s")
    _, rows = _run_available_now(spark, stream, f"{tmp_dir}/ck1", "src_now1")
    assert sorted(r.body for r in rows) == sorted(f"n{i}".encode() for i in range(200))
    # A second run from the same checkpoint sees only what was published since (plus the
    # first run's last batch, redelivered because its commit never came: at-least-once).
    publish(nsqd, "src_now", [f"later{i}".encode() for i in range(50)])
    _, rows = _run_available_now(spark, stream, f"{tmp_dir}/ck1", "src_now2")
    later = {r.body for r in rows if r.body.startswith(b"later")}
    assert later == {f"later{i}".encode() for i in range(50)}


def test_lookupd_discovers_two_nsqds(spark: Any, tmp_dir: str) -> None:
    env = pythonpath_env()
    with DaemonProcess("nsqlookupd", env=env) as lookupd:
        lookupd_tcp = "{}:{}".format(*lookupd.tcp_address)
        flags = [f"--lookupd-tcp-address={lookupd_tcp}", "--broadcast-address=127.0.0.1"]
        with (
            DaemonProcess("nsqd", [*flags], env=env) as a,
            DaemonProcess("nsqd", [*flags], env=env) as b,
        ):
            publish(a, "src_lookup", [f"a{i}".encode() for i in range(300)])
            publish(b, "src_lookup", [f"b{i}".encode() for i in range(200)])
            lookupd_http = http(lookupd)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # both registered the topic
                import json
                import urllib.request

                url = f"http://{lookupd_http}/lookup?topic=src_lookup"
                try:
                    with urllib.request.urlopen(url) as response:
                        if len(json.load(response)["producers"]) == 2:
                            break
                except OSError:
                    pass
                time.sleep(0.1)
            stream = _stream(spark, "src_lookup", lookupd=lookupd_http)
            _, rows = _run_available_now(spark, stream, f"{tmp_dir}/ck", "src_lookup")
            assert len(rows) == 500
            by_nsqd = {tcp(a): 0, tcp(b): 0}
            for row in rows:
                by_nsqd[row.nsqd] += 1
            assert by_nsqd == {tcp(a): 300, tcp(b): 200}


def test_slow_batches_are_kept_alive_without_redelivery(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    """Batches that take twice the msg_timeout: TOUCH keeps their messages (and those buffered
    for the next batch) in flight, so nothing times out and nothing is delivered twice."""
    publish(nsqd, "src_slow", [f"s{i}".encode() for i in range(300)])
    stream = _stream(spark, "src_slow", nsqd=tcp(nsqd), msgTimeout="1s", maxMessagesPerBatch="100")
    seen: list[Any] = []

    def slow(batch: Any, batch_id: int) -> None:
        seen.extend(batch.select("id", "attempts").collect())
        time.sleep(2.5)

    query = (
        stream.writeStream.foreachBatch(slow)
        .option("checkpointLocation", f"{tmp_dir}/ck")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90)
    assert query.exception() is None
    assert len(seen) == 300 and len({r.id for r in seen}) == 300
    assert {r.attempts for r in seen} == {1}
    stats = channel_stats(nsqd, "src_slow", "spark")
    assert stats["timeout_count"] == 0
