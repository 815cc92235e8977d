"""The e2e processing latency estimator (percentiles, window rotation, merge) and the pieces of
`/stats` that need no daemon: client stats and the pub_counts quirk, memory stats, the text
format and Go's duration formatting."""

from __future__ import annotations

import gc
import time
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from trionsq.nsqd import stats as stats_module
from trionsq.nsqd.e2e_latency import (
    RELATIVE_ACCURACY,
    E2ELatency,
    disabled_result,
    for_options,
    merged_result,
)
from trionsq.nsqd.options import NSQDOptions
from trionsq.nsqd.stats import client_stats, format_text, go_duration, memory_stats
from trionsq.protocol import encode_message_frame
from trionsq.version import version_string

MS = 1_000_000


def values(result: dict[str, Any]) -> dict[float, float]:
    return {p["quantile"]: p["value"] for p in result["percentiles"]}


# -- the estimator --------------------------------------------------------------------------


def test_percentiles_of_known_data_are_within_the_relative_accuracy():
    estimator = E2ELatency(600.0, [1.0, 0.99, 0.5, 0.01], now=0.0)
    for latency_ms in range(1, 1001):
        estimator.record(latency_ms * MS, now=1.0)
    result = estimator.result(now=2.0)
    assert result["count"] == 1000
    assert [p["quantile"] for p in result["percentiles"]] == [1.0, 0.99, 0.5, 0.01]
    got = values(result)
    assert got[1.0] == 1000 * MS  # the maximum is exact
    for quantile, expected_ms in ((0.99, 990), (0.5, 500), (0.01, 10)):
        assert got[quantile] == pytest.approx(expected_ms * MS, rel=RELATIVE_ACCURACY)
    assert all(isinstance(v, float) for v in got.values())


def test_a_single_sample_is_reported_exactly_at_every_quantile():
    estimator = E2ELatency(600.0, [0.99, 0.5], now=0.0)
    estimator.record(123_456_789, now=0.0)
    assert estimator.result(now=0.0) == {
        "count": 1,
        "percentiles": [
            {"quantile": 0.99, "value": 123_456_789.0},
            {"quantile": 0.5, "value": 123_456_789.0},
        ],
    }


def test_an_empty_estimator_reports_zero_values_and_disabled_reports_null():
    estimator = E2ELatency(600.0, [0.99], now=0.0)
    assert estimator.result(now=0.0) == {
        "count": 0,
        "percentiles": [{"quantile": 0.99, "value": 0.0}],
    }
    assert disabled_result() == {"count": 0, "percentiles": None}


def test_clock_steps_record_non_positive_latencies_without_error():
    estimator = E2ELatency(600.0, [1.0, 0.5], now=0.0)
    estimator.record(-5, now=0.0)
    estimator.record(0, now=0.0)
    estimator.record(1, now=0.0)
    got = values(estimator.result(now=0.0))
    assert got[1.0] == 1.0 and -5.0 <= got[0.5] <= 1.0


def test_samples_live_between_half_a_window_and_a_window():
    estimator = E2ELatency(10.0, [0.5], now=0.0)
    estimator.record(1 * MS, now=1.0)
    assert estimator.result(now=5.0)["count"] == 1  # still the current half
    estimator.record(2 * MS, now=5.5)  # window moved at 5: 1 ms is in the older half
    assert estimator.result(now=9.9)["count"] == 2
    assert estimator.result(now=10.1)["count"] == 1  # moved at 10: the 1 ms half is gone
    assert estimator.result(now=15.1)["count"] == 0


def test_after_a_long_idle_both_halves_are_dropped_and_the_phase_is_kept():
    estimator = E2ELatency(10.0, [0.5], now=0.0)
    estimator.record(1 * MS, now=1.0)
    assert estimator.result(now=1_000_001.0)["count"] == 0
    estimator.record(1 * MS, now=1_000_001.0)
    # The windows still move at multiples of 5 s from the start: next at 1_000_005.
    assert estimator.result(now=1_000_009.9)["count"] == 1
    assert estimator.result(now=1_000_010.1)["count"] == 0


async def test_rotation_follows_trio_clock(autojump_clock):
    estimator = E2ELatency(60.0, [0.5])
    estimator.record(3 * MS)
    await trio.sleep(31)
    assert estimator.result()["count"] == 1
    await trio.sleep(30)
    assert estimator.result()["count"] == 0


def test_record_frame_measures_from_the_message_timestamp():
    estimator = E2ELatency(600.0, [1.0], now=0.0)
    published = time.time_ns() - 2_000 * MS
    frame = encode_message_frame(b"0" * 16, published, 1, b"body")
    estimator.record_frame(frame, now=0.0)
    latency = values(estimator.result(now=0.0))[1.0]
    assert 2_000 * MS <= latency < 2_100 * MS


def test_merged_result_covers_every_sample_of_every_estimator():
    first = E2ELatency(10.0, [1.0, 0.5], now=0.0)
    second = E2ELatency(10.0, [1.0, 0.5], now=0.0)
    for latency_ms in range(1, 51):
        first.record(latency_ms * MS, now=1.0)
    first.record(60 * MS, now=6.0)  # in first's other half
    for latency_ms in range(51, 101):
        second.record(latency_ms * MS, now=1.0)
    merged = merged_result([first, None, second], now=7.0)
    assert merged["count"] == 101
    assert values(merged)[1.0] == 100 * MS
    # The 51st of 1..50, 51..60, 60, 61..100.
    assert values(merged)[0.5] == pytest.approx(51 * MS, rel=RELATIVE_ACCURACY)
    assert merged_result([None, None]) == disabled_result()
    assert merged_result([]) == disabled_result()


def test_for_options_builds_an_estimator_only_with_percentiles():
    assert for_options(NSQDOptions(), now=0.0) is None
    options = NSQDOptions(
        e2e_processing_latency_percentiles=[0.99, 0.5], e2e_processing_latency_window_time=60.0
    )
    estimator = for_options(options, now=0.0)
    assert estimator is not None and estimator.percentiles == (0.99, 0.5)


def test_a_zero_window_does_not_hang():
    estimator = E2ELatency(0.0, [0.5], now=0.0)
    estimator.record(1, now=100.0)
    assert estimator.result(now=100.0)["count"] == 1


# -- client stats ---------------------------------------------------------------------------


def fake_client(**fields: Any) -> Any:
    defaults: dict[str, Any] = {
        "client_id": "cid",
        "hostname": "host.example",
        "remote_address": "127.0.0.1:4242",
        "state": 3,
        "rdy": 10,
        "in_flight": {b"a": None, b"b": None},
        "message_count": 5,
        "finish_count": 3,
        "requeue_count": 1,
        "connect_ts": 1_700_000_000,
        "sample_rate": 0,
        "user_agent": "ua/1.0",
        "pub_counts": {},
        "tls": None,
        "snappy": False,
        "deflate": False,
        "auth_state": None,
    }
    defaults.update(fields)
    return SimpleNamespace(**defaults)


def test_client_stats_has_nsq_keys_in_order_and_omits_empty_omitempty_fields():
    stats = client_stats(fake_client())
    assert list(stats) == [
        "client_id",
        "hostname",
        "version",
        "remote_address",
        "state",
        "ready_count",
        "in_flight_count",
        "message_count",
        "finish_count",
        "requeue_count",
        "connect_ts",
        "sample_rate",
        "deflate",
        "snappy",
        "user_agent",
        "topology_zone",
        "topology_region",
        "tls",
        "tls_cipher_suite",
        "tls_version",
        "tls_negotiated_protocol",
        "tls_negotiated_protocol_is_mutual",
    ]
    assert stats["version"] == "V2"
    assert (stats["state"], stats["ready_count"], stats["in_flight_count"]) == (3, 10, 2)
    assert stats["tls"] is False and stats["tls_version"] == ""


def test_pub_counts_lists_at_most_one_topic_and_honours_the_topic_filter():
    client = fake_client(pub_counts={"first": 3, "second": 4})
    stats = client_stats(client)
    assert stats["pub_counts"] == [{"topic": "first", "count": 3}]
    assert list(stats).index("pub_counts") == list(stats).index("topology_region") + 1
    assert client_stats(client, "second")["pub_counts"] == [{"topic": "second", "count": 4}]
    assert "pub_counts" not in client_stats(client, "other")


# -- memory ---------------------------------------------------------------------------------


def test_memory_stats_has_go_keys_and_counts_collections_and_pauses():
    before = memory_stats()
    assert list(before) == [
        "heap_objects",
        "heap_idle_bytes",
        "heap_in_use_bytes",
        "heap_released_bytes",
        "gc_pause_usec_100",
        "gc_pause_usec_99",
        "gc_pause_usec_95",
        "next_gc_bytes",
        "gc_total_runs",
    ]
    assert all(isinstance(v, int) and v >= 0 for v in before.values())
    assert before["heap_objects"] > 0 and before["heap_in_use_bytes"] > 1 << 20
    pauses_before = len(stats_module._gc_pauses_ns)
    gc.collect()
    after = memory_stats()
    assert after["gc_total_runs"] > before["gc_total_runs"]
    assert len(stats_module._gc_pauses_ns) > pauses_before or pauses_before == 256
    assert after["gc_pause_usec_100"] >= after["gc_pause_usec_99"] >= after["gc_pause_usec_95"]


def test_gc_pause_percentile_picks_as_go_does():
    pick = stats_module._percentile
    assert pick(99.0, []) == 0
    assert pick(100.0, [1, 2, 3]) == 3
    ascending = list(range(100))
    assert (pick(95.0, ascending), pick(99.0, ascending)) == (95, 99)
    assert pick(50.0, [10, 20, 30]) == 30  # index floor(1.5 + 0.5) = 2
    assert pick(40.0, [10, 20, 30]) == 20  # index floor(1.2 + 0.5) = 1


# -- the text format ------------------------------------------------------------------------

START = 1_700_000_000


def latency(*nanoseconds: float) -> dict[str, Any]:
    return {
        "count": len(nanoseconds),
        "percentiles": [{"quantile": 0.9, "value": v} for v in nanoseconds],
    }


def text_snapshot() -> dict[str, Any]:
    consumer = client_stats(fake_client(connect_ts=START + 10))
    producer = client_stats(
        fake_client(pub_counts={"t": 7}, remote_address="[::1]:5555", user_agent="pub/2")
    )
    channel = {
        "channel_name": "ch",
        "depth": 1,
        "backend_depth": 0,
        "in_flight_count": 2,
        "deferred_count": 0,
        "message_count": 9,
        "requeue_count": 1,
        "timeout_count": 0,
        "client_count": 1,
        "clients": [consumer],
        "paused": True,
        "e2e_processing_latency": latency(1_500_000.0, 2e9),
    }
    topic = {
        "topic_name": "t",
        "channels": [channel],
        "depth": 0,
        "backend_depth": 0,
        "message_count": 9,
        "message_bytes": 90,
        "paused": False,
        "e2e_processing_latency": disabled_result(),
    }
    return {
        "version": "1.3.0",
        "health": "OK",
        "start_time": START,
        "topics": [topic, dict(topic, topic_name="u", channels=[], paused=True)],
        "producers": [producer],
    }


def test_text_format_lines(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        text = format_text(text_snapshot(), now=START + 61.5)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert text.splitlines() == [
        version_string("nsqd"),
        "start_time 2023-11-14T22:13:20Z",
        "uptime 1m1.5s",
        "",
        "Health: OK",
        "",
        "Topics:",
        "   [t              ] depth: 0     be-depth: 0     msgs: 9        e2e%: ",
        "   *P [ch                       ] depth: 1     be-depth: 0     inflt: 2    def: 0    "
        "re-q: 1     timeout: 0     msgs: 9        e2e%: 1.5ms, 2.0s",
        "        [V2 host.example:4242 ua/1.0] state: 3 inflt: 2    rdy: 10   fin: 3        "
        "re-q: 1        msgs: 5        connected: 51s",
        "",
        "*P [u              ] depth: 0     be-depth: 0     msgs: 9        e2e%: ",
        "",
        "Producers:",
        "   [V2 host.example:5555 pub/2] msgs: 7        topics: t=7 connected: 1m1s",
    ]
    assert text.endswith("connected: 1m1s\n")


def test_text_format_when_empty_and_with_memory():
    snapshot = dict(text_snapshot(), topics=[], producers=None, memory=memory_stats())
    lines = format_text(snapshot, now=START).splitlines()
    assert lines[2] == "uptime 0s"
    assert lines[5:7] == ["", "Memory:"]
    assert lines[7] == f"   {'heap_objects':<25}\t{snapshot['memory']['heap_objects']}"
    assert lines[-4:] == ["", "Topics: None", "", "Producers: None"]


def test_text_format_client_without_port_and_filtered_topics_null():
    snapshot = dict(text_snapshot(), topics=None)
    consumer = client_stats(fake_client(remote_address="memory", hostname="h", user_agent=""))
    snapshot["producers"] = [dict(consumer, pub_counts=[{"topic": "x", "count": 2}])]
    lines = format_text(snapshot, now=START).splitlines()
    assert "Topics: None" in lines
    assert lines[-1].startswith(f"   [V2 {'h: ':<21}] msgs: 2        topics: x=2 connected: ")


@pytest.mark.parametrize(
    ("nanoseconds", "text"),
    [
        (0, "0s"),
        (7, "7ns"),
        (1_500, "1.5µs"),
        (1_000_000, "1ms"),
        (250_500_000, "250.5ms"),
        (1_500_000_000, "1.5s"),
        (60_000_000_000, "1m0s"),
        (3_661_000_000_000, "1h1m1s"),
        (3_600_000_000_001, "1h0m0.000000001s"),
        (-2_000_000_000, "-2s"),
    ],
)
def test_go_duration(nanoseconds, text):
    assert go_duration(nanoseconds) == text


@pytest.mark.parametrize(
    ("nanoseconds", "text"),
    [(0.0, "0.0ns"), (1000.0, "1000.0ns"), (1500.0, "1.5us"), (2.5e6, "2.5ms"), (3e9, "3.0s")],
)
def test_nanoseconds_to_human(nanoseconds, text):
    assert stats_module._human_ns(nanoseconds) == text


@pytest.mark.parametrize(
    ("address", "port"),
    [("127.0.0.1:1", "1"), ("[::1]:2", "2"), ("memory", ""), ("::1", ""), ("/tmp/sock", "")],
)
def test_port_of_remote_address(address, port):
    assert stats_module._port(address) == port
