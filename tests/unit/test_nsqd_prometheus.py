"""The Prometheus exposition of a hand-made `/stats` snapshot, checked with prometheus_client's
own text parser, and the process metrics read from this process."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.stats_samples import channel_stats, latency, topic_stats
from trionsq.nsqd.prometheus import (
    CONTENT_TYPE,
    ProcessMetrics,
    read_process_metrics,
    render_prometheus,
)

PROCESS = ProcessMetrics(
    cpu_seconds=1.5,
    start_time_seconds=1700000000.25,
    resident_memory_bytes=4096,
    virtual_memory_bytes=8192,
    open_fds=7,
    max_fds=1024,
)
WEIRD_CHANNEL = 'say "hi"\\now\nthen'


def _snapshot() -> dict[str, Any]:
    archive = channel_stats(
        "archive",
        depth=12,
        backend_depth=10,
        in_flight_count=3,
        deferred_count=2,
        message_count=500,
        requeue_count=4,
        timeout_count=5,
        client_count=2,
        paused=True,
        e2e_processing_latency=latency((0.99, 2_500_000.0), (0.5, 1_000_000.0), count=3),
    )
    weird = channel_stats(WEIRD_CHANNEL, message_count=1, client_count=1)
    orders = topic_stats(
        "orders",
        archive,
        weird,
        depth=7,
        backend_depth=6,
        message_count=501,
        message_bytes=65536,
        e2e_processing_latency=latency((0.99, 2_500_000.0), count=3),
    )
    empty = topic_stats("empty#ephemeral", paused=True)
    return {
        "version": "1.3.0",
        "health": "OK",
        "start_time": 1700000000,
        "topics": [empty, orders],
        "memory": {"heap_objects": 100, "next_gc_bytes": 4096, "gc_total_runs": 9},
        "producers": [{"client_id": "p1"}],
    }


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _values(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    family = _families(text)[name]
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


@pytest.fixture
def text() -> str:
    return render_prometheus(_snapshot(), PROCESS)


def test_families_and_types(text: str) -> None:
    types = {name: family.type for name, family in _families(text).items()}
    expected = {
        "nsq_build_info": "gauge",
        "nsq_healthy": "gauge",
        "nsq_start_time_seconds": "gauge",
        "nsq_topics": "gauge",
        "nsq_channels": "gauge",
        "nsq_clients": "gauge",
        "nsq_producers": "gauge",
        "nsq_topic_messages": "counter",
        "nsq_topic_message_bytes": "counter",
        "nsq_topic_depth": "gauge",
        "nsq_topic_backend_depth": "gauge",
        "nsq_topic_paused": "gauge",
        "nsq_topic_channels": "gauge",
        "nsq_topic_e2e_processing_latency_seconds": "gauge",
        "nsq_channel_messages": "counter",
        "nsq_channel_depth": "gauge",
        "nsq_channel_backend_depth": "gauge",
        "nsq_channel_in_flight": "gauge",
        "nsq_channel_deferred": "gauge",
        "nsq_channel_requeues": "counter",
        "nsq_channel_timeouts": "counter",
        "nsq_channel_clients": "gauge",
        "nsq_channel_paused": "gauge",
        "nsq_channel_e2e_processing_latency_seconds": "gauge",
        "nsq_memory_heap_objects": "gauge",
        "nsq_memory_next_gc_bytes": "gauge",
        "nsq_memory_gc_runs": "counter",
        "process_cpu_seconds": "counter",
        "process_start_time_seconds": "gauge",
        "process_resident_memory_bytes": "gauge",
        "process_virtual_memory_bytes": "gauge",
        "process_open_fds": "gauge",
        "process_max_fds": "gauge",
    }
    assert types == expected


def test_every_family_has_help_and_type_lines(text: str) -> None:
    lines = text.splitlines()
    helped = {line.split()[2] for line in lines if line.startswith("# HELP ")}
    typed = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    sampled = {line.split("{")[0].split()[0] for line in lines if not line.startswith("#")}
    assert sampled <= helped == typed
    assert text.endswith("\n")


def test_counters_carry_the_total_suffix(text: str) -> None:
    family = _families(text)["nsq_channel_requeues"]
    assert {s.name for s in family.samples} == {"nsq_channel_requeues_total"}
    assert "# TYPE nsq_topic_messages_total counter" in text


def test_daemon_gauges(text: str) -> None:
    assert _values(text, "nsq_build_info") == {(("version", "1.3.0"),): 1}
    assert _values(text, "nsq_healthy") == {(): 1}
    assert _values(text, "nsq_start_time_seconds") == {(): 1700000000}
    assert _values(text, "nsq_topics") == {(): 2}
    assert _values(text, "nsq_channels") == {(): 2}
    assert _values(text, "nsq_clients") == {(): 3}
    assert _values(text, "nsq_producers") == {(): 1}


def test_topic_metrics_with_topic_label(text: str) -> None:
    assert _values(text, "nsq_topic_messages") == {
        (("topic", "empty#ephemeral"),): 0,
        (("topic", "orders"),): 501,
    }
    assert _values(text, "nsq_topic_message_bytes")[(("topic", "orders"),)] == 65536
    assert _values(text, "nsq_topic_depth")[(("topic", "orders"),)] == 7
    assert _values(text, "nsq_topic_backend_depth")[(("topic", "orders"),)] == 6
    assert _values(text, "nsq_topic_paused") == {
        (("topic", "empty#ephemeral"),): 1,
        (("topic", "orders"),): 0,
    }
    assert _values(text, "nsq_topic_channels")[(("topic", "orders"),)] == 2
    assert _values(text, "nsq_topic_e2e_processing_latency_seconds") == {
        (("quantile", "0.99"), ("topic", "orders")): pytest.approx(0.0025),
    }


def test_channel_metrics_with_topic_and_channel_labels(text: str) -> None:
    key = (("channel", "archive"), ("topic", "orders"))
    expected = {
        "nsq_channel_messages": 500,
        "nsq_channel_depth": 12,
        "nsq_channel_backend_depth": 10,
        "nsq_channel_in_flight": 3,
        "nsq_channel_deferred": 2,
        "nsq_channel_requeues": 4,
        "nsq_channel_timeouts": 5,
        "nsq_channel_clients": 2,
        "nsq_channel_paused": 1,
    }
    for name, value in expected.items():
        assert _values(text, name)[key] == value, name
    assert _values(text, "nsq_channel_e2e_processing_latency_seconds") == {
        (("channel", "archive"), ("quantile", "0.99"), ("topic", "orders")): pytest.approx(0.0025),
        (("channel", "archive"), ("quantile", "0.5"), ("topic", "orders")): pytest.approx(0.001),
    }


def test_label_values_are_escaped(text: str) -> None:
    assert 'channel="say \\"hi\\"\\\\now\\nthen"' in text
    key = (("channel", WEIRD_CHANNEL), ("topic", "orders"))
    assert _values(text, "nsq_channel_messages")[key] == 1
    assert _values(text, "nsq_channel_clients")[key] == 1


def test_memory_metrics_from_the_snapshot(text: str) -> None:
    assert _values(text, "nsq_memory_heap_objects") == {(): 100}
    assert _values(text, "nsq_memory_next_gc_bytes") == {(): 4096}
    assert _values(text, "nsq_memory_gc_runs") == {(): 9}


def test_process_metrics(text: str) -> None:
    assert _values(text, "process_cpu_seconds") == {(): 1.5}
    assert _values(text, "process_start_time_seconds") == {(): 1700000000.25}
    assert _values(text, "process_resident_memory_bytes") == {(): 4096}
    assert _values(text, "process_open_fds") == {(): 7}
    assert _values(text, "process_max_fds") == {(): 1024}


def test_unavailable_process_metrics_are_left_out() -> None:
    text = render_prometheus({"topics": []}, ProcessMetrics(cpu_seconds=0.0))
    names = set(_families(text))
    assert "process_cpu_seconds" in names
    assert not names & {"process_open_fds", "process_resident_memory_bytes"}


def test_unhealthy_and_clientless_snapshot() -> None:
    snapshot = _snapshot() | {"health": "NOK - disk full", "producers": None}
    text = render_prometheus(snapshot, PROCESS)
    assert _values(text, "nsq_healthy") == {(): 0}
    assert "nsq_producers" not in _families(text)


@pytest.mark.parametrize(
    "snapshot",
    [
        {"version": "1.3.0", "health": "OK", "start_time": 1, "topics": [], "producers": []},
        {"topics": None},
        {},
    ],
)
def test_empty_snapshot_renders_valid_output(snapshot: dict[str, Any]) -> None:
    text = render_prometheus(snapshot, PROCESS)
    families = _families(text)
    assert families["nsq_topics"].samples[0].value == 0
    assert families["nsq_topic_depth"].samples == []
    assert families["nsq_channel_e2e_processing_latency_seconds"].samples == []
    assert "nsq_memory_heap_objects" not in families


def test_content_type_names_the_format_version() -> None:
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_render_reads_this_process_by_default() -> None:
    text = render_prometheus({"topics": []})
    assert _values(text, "process_cpu_seconds")[()] > 0


def test_read_process_metrics_describes_this_process() -> None:
    metrics = read_process_metrics()
    assert metrics.cpu_seconds > 0
    assert metrics.start_time_seconds is not None
    assert time.time() - 24 * 3600 < metrics.start_time_seconds <= time.time()
    if sys.platform == "linux":
        assert metrics.resident_memory_bytes is not None
        assert metrics.virtual_memory_bytes is not None
        assert 0 < metrics.resident_memory_bytes <= metrics.virtual_memory_bytes
        assert metrics.open_fds is not None
        assert metrics.open_fds >= 3
        fd = os.open(os.devnull, os.O_RDONLY)
        try:
            assert read_process_metrics().open_fds == metrics.open_fds + 1
        finally:
            os.close(fd)
