"""The ``nsq`` sink: batch and streaming writes, topic routing, body types, NSQ errors."""

from __future__ import annotations

from typing import Any

import pytest

from trionsq.testing import DaemonProcess, pythonpath_env

from .conftest import consume, publish, tcp, topic_count


def test_batch_write_string_bodies_round_trip(spark: Any, nsqd: DaemonProcess) -> None:
    bodies = [f"message {i}" for i in range(2500)]
    df = spark.createDataFrame([(b,) for b in bodies], "body string").repartition(2)
    df.write.format("nsq").mode("append").option("nsqd", tcp(nsqd)).option(
        "topic", "sink_str"
    ).option("batchSize", "300").save()
    got = consume(nsqd, "sink_str", len(bodies))
    assert sorted(got) == sorted(b.encode() for b in bodies)
    assert topic_count(nsqd, "sink_str") == len(bodies)


def test_batch_write_binary_value_column(spark: Any, nsqd: DaemonProcess) -> None:
    bodies = [bytes([i % 256, 0, 255, i // 256]) + b"\x00\n" for i in range(600)]
    df = spark.createDataFrame([(b, "ignored") for b in bodies], "value binary, key string")
    df.write.format("nsq").mode("append").option("nsqd", tcp(nsqd)).option(
        "topic", "sink_bin"
    ).save()
    assert sorted(consume(nsqd, "sink_bin", len(bodies))) == sorted(bodies)


def test_topic_column_routes_rows(spark: Any, nsqd: DaemonProcess) -> None:
    rows = [(f"a{i}", "route_a") for i in range(300)] + [(f"b{i}", "route_b") for i in range(200)]
    df = spark.createDataFrame(rows, "body string, topic string").repartition(2)
    df.write.format("nsq").mode("append").option("nsqd", tcp(nsqd)).save()
    assert topic_count(nsqd, "route_a") == 300
    assert topic_count(nsqd, "route_b") == 200
    assert sorted(consume(nsqd, "route_a", 300)) == sorted(f"a{i}".encode() for i in range(300))
    assert sorted(consume(nsqd, "route_b", 200)) == sorted(f"b{i}".encode() for i in range(200))


def test_body_over_max_msg_size_fails_the_job_with_the_nsq_error(spark: Any) -> None:
    with DaemonProcess("nsqd", ["--max-msg-size=1024"], env=pythonpath_env()) as small:
        df = spark.createDataFrame([("x" * 10,), ("y" * 5000,)], "body string").coalesce(1)
        with pytest.raises(Exception, match="E_BAD_MESSAGE") as info:
            df.write.format("nsq").mode("append").option("nsqd", tcp(small)).option(
                "topic", "too_big"
            ).save()
        assert "message too big" in str(info.value)


def test_invalid_topic_column_fails_with_e_bad_topic(spark: Any, nsqd: DaemonProcess) -> None:
    df = spark.createDataFrame([("x", "bad topic!")], "body string, topic string")
    with pytest.raises(Exception, match="E_BAD_TOPIC"):
        df.write.format("nsq").mode("append").option("nsqd", tcp(nsqd)).save()


def test_invalid_topic_option_fails_before_any_task(spark: Any, nsqd: DaemonProcess) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="E_BAD_TOPIC"):
        df.write.format("nsq").mode("append").option("nsqd", tcp(nsqd)).option(
            "topic", "no/slash"
        ).save()


def test_streaming_sink_relays_a_topic(spark: Any, nsqd: DaemonProcess, tmp_dir: str) -> None:
    bodies = [f"relay {i}".encode() for i in range(700)]
    publish(nsqd, "relay_in", bodies)
    stream = (
        spark.readStream.format("nsq")
        .option("nsqd", tcp(nsqd))
        .option("topic", "relay_in")
        .option("channel", "relay")
        .option("maxMessagesPerBatch", "300")
        .load()
    )
    query = (
        stream.select("body")
        .writeStream.format("nsq")
        .option("nsqd", tcp(nsqd))
        .option("topic", "relay_out")
        .option("checkpointLocation", f"{tmp_dir}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90)
    assert query.exception() is None
    assert sorted(consume(nsqd, "relay_out", len(bodies))) == sorted(bodies)
