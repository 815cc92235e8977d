"""statsd rendering, packing and prefix expansion on hand-made `/stats` snapshots, and the push
loop against a UDP socket on 127.0.0.1 (virtual clock)."""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

import pytest
import trio
import trio.testing

from tests.stats_samples import channel_stats, latency, memory_stats, topic_stats
from trionsq.nsqd.options import NSQDOptions
from trionsq.nsqd.statsd import (
    expand_statsd_prefix,
    pack_statsd_packets,
    render_statsd_lines,
    statsd_host_key,
    statsd_loop,
)

P = "nsq.host_4151."


def _snapshot(*topics: dict[str, Any], memory: dict[str, int] | None = None) -> dict[str, Any]:
    snapshot: dict[str, Any] = {
        "version": "1.3.0",
        "health": "OK",
        "start_time": 1700000000,
        "topics": list(topics),
        "producers": [],
    }
    if memory is not None:
        snapshot["memory"] = memory
    return snapshot


def _opts(**kwargs: Any) -> NSQDOptions:
    kwargs.setdefault("statsd_mem_stats", False)
    return NSQDOptions(**kwargs)


# --- prefix ------------------------------------------------------------------------------


def test_host_key_replaces_dots_and_colons() -> None:
    assert statsd_host_key("host.example.com:4151") == "host_example_com_4151"


@pytest.mark.parametrize(
    ("prefix", "address", "port", "expected"),
    [
        ("nsq.%s", "host.example.com", 4151, "nsq.host_example_com_4151."),
        ("nsq.%s.", "10.0.0.1", 4151, "nsq.10_0_0_1_4151."),
        ("%s.%s", "h", 1, "h_1.h_1."),
        ("app.nsqd", "h", 4151, "app.nsqd."),
        ("", "h", 4151, ""),
        ("nsq.%s", "::1", 4151, "nsq.[__1]_4151."),
    ],
)
def test_prefix_expansion_as_go_does_it(
    prefix: str, address: str, port: int, expected: str
) -> None:
    assert expand_statsd_prefix(prefix, address, port) == expected


# --- rendering ---------------------------------------------------------------------------


def test_first_push_sends_totals_and_gauges_in_go_order() -> None:
    channel = channel_stats(
        "ch",
        depth=3,
        backend_depth=1,
        in_flight_count=2,
        deferred_count=4,
        message_count=50,
        requeue_count=5,
        timeout_count=6,
        client_count=7,
    )
    topic = topic_stats(
        "t", channel, depth=8, backend_depth=2, message_count=100, message_bytes=999
    )
    lines = render_statsd_lines(None, _snapshot(topic), P, _opts())
    assert lines == [
        f"{P}topic.t.message_count:100|c",
        f"{P}topic.t.message_bytes:999|c",
        f"{P}topic.t.depth:8|g",
        f"{P}topic.t.backend_depth:2|g",
        f"{P}topic.t.channel.ch.message_count:50|c",
        f"{P}topic.t.channel.ch.depth:3|g",
        f"{P}topic.t.channel.ch.backend_depth:1|g",
        f"{P}topic.t.channel.ch.in_flight_count:2|g",
        f"{P}topic.t.channel.ch.deferred_count:4|g",
        f"{P}topic.t.channel.ch.requeue_count:5|c",
        f"{P}topic.t.channel.ch.timeout_count:6|c",
        f"{P}topic.t.channel.ch.clients:7|g",
    ]


def test_counters_are_deltas_and_gauges_are_current_values() -> None:
    before = _snapshot(
        topic_stats(
            "t",
            channel_stats("ch", message_count=50, requeue_count=5, timeout_count=6, depth=9),
            message_count=100,
            message_bytes=1000,
            depth=20,
        )
    )
    after = _snapshot(
        topic_stats(
            "t",
            channel_stats("ch", message_count=80, requeue_count=5, timeout_count=9, depth=1),
            message_count=130,
            message_bytes=1600,
            depth=2,
        )
    )
    lines = set(render_statsd_lines(before, after, P, _opts()))
    assert f"{P}topic.t.message_count:30|c" in lines
    assert f"{P}topic.t.message_bytes:600|c" in lines
    assert f"{P}topic.t.depth:2|g" in lines
    assert f"{P}topic.t.channel.ch.message_count:30|c" in lines
    assert f"{P}topic.t.channel.ch.requeue_count:0|c" in lines  # zero deltas are still sent
    assert f"{P}topic.t.channel.ch.timeout_count:3|c" in lines
    assert f"{P}topic.t.channel.ch.depth:1|g" in lines


def test_opt_in_features_counters_follow_nsqs_naming_only_where_present() -> None:
    def snapshot(dead: int, dropped: int, failovers: int, lag: int) -> dict[str, Any]:
        return _snapshot(
            topic_stats(
                "t",
                channel_stats("ch", dead_letter_count=dead, expired_count=dead // 2),
                channel_stats("plain"),
                dropped_count=dropped,
                rejected_count=0,
                backend_bytes=4096,
                max_depth=100,
                max_bytes=0,
                replication={
                    "role": "primary",
                    "epoch": 2049,
                    "failovers": failovers,
                    "members": [
                        {"address": "10.0.0.2:4150", "lag_messages": lag},
                        {"address": "10.0.0.1:4150", "lag_messages": None},
                    ],
                },
            ),
            topic_stats("other"),
        )

    lines = render_statsd_lines(snapshot(4, 10, 1, 7), snapshot(10, 25, 2, 3), P, _opts())
    assert set(lines) >= {
        f"{P}topic.t.channel.ch.dead_letter_count:6|c",
        f"{P}topic.t.channel.ch.expired_count:3|c",
        f"{P}topic.t.dropped_count:15|c",
        f"{P}topic.t.rejected_count:0|c",
        f"{P}topic.t.backend_bytes:4096|g",
        f"{P}topic.t.max_depth:100|g",
        f"{P}topic.t.replication.role.primary:1|g",
        f"{P}topic.t.replication.role.replica:0|g",
        f"{P}topic.t.replication.epoch:2049|g",
        f"{P}topic.t.replication.failovers:1|c",
        f"{P}topic.t.replication.lag_messages.10_0_0_2_4150:3|g",
    }
    # A topic or channel without a feature sends NSQ's lines and nothing more.
    assert not [line for line in lines if ".plain." in line and "dead_letter" in line]
    assert not [
        line
        for line in lines
        if line.startswith(f"{P}topic.other.") and ("dropped" in line or "replication" in line)
    ]
    assert not [line for line in lines if "10_0_0_1" in line]  # no lag known: no line


def test_new_topic_and_channel_count_from_zero_and_recreated_go_negative() -> None:
    before = _snapshot(topic_stats("old", channel_stats("a", message_count=10), message_count=10))
    after = _snapshot(
        topic_stats("new", channel_stats("b", message_count=4), message_count=4),
        topic_stats(
            "old", channel_stats("a", message_count=3), channel_stats("c", message_count=2)
        ),
    )
    lines = set(render_statsd_lines(before, after, "", _opts()))
    assert "topic.new.message_count:4|c" in lines
    assert "topic.new.channel.b.message_count:4|c" in lines
    assert "topic.old.message_count:-10|c" in lines  # Go's uint64 diff cast to int64
    assert "topic.old.channel.a.message_count:-7|c" in lines
    assert "topic.old.channel.c.message_count:2|c" in lines


def test_e2e_percentiles_are_gauges_named_by_quantile_percent() -> None:
    channel_latency = latency((0.99, 1234567.9), (0.5, 1000.0), (0.999, 5e6), (1.0, 7e6))
    topic = topic_stats(
        "t",
        channel_stats("ch", e2e_processing_latency=channel_latency),
        **{"e2e_processing_latency": latency((0.95, 42.7))},
    )
    lines = render_statsd_lines(None, _snapshot(topic), P, _opts())
    assert f"{P}topic.t.e2e_processing_latency_95:42|g" in lines
    channel_lines = [line for line in lines if "channel.ch.e2e" in line]
    assert channel_lines == [
        f"{P}topic.t.channel.ch.e2e_processing_latency_99:1234567|g",
        f"{P}topic.t.channel.ch.e2e_processing_latency_50:1000|g",
        f"{P}topic.t.channel.ch.e2e_processing_latency_100:5000000|g",  # %.0f of 99.9
        f"{P}topic.t.channel.ch.e2e_processing_latency_100:7000000|g",
    ]


def test_disabled_e2e_sends_no_percentile_lines() -> None:
    lines = render_statsd_lines(None, _snapshot(topic_stats("t", channel_stats("c"))), P, _opts())
    assert not [line for line in lines if "e2e" in line]


def test_mem_stats_on_sends_gauges_and_gc_runs_delta() -> None:
    before = _snapshot(memory=memory_stats(gc_total_runs=10))
    after = _snapshot(
        memory=memory_stats(
            heap_objects=5, next_gc_bytes=4096, gc_pause_usec_99=12, gc_total_runs=13
        )
    )
    options = _opts(statsd_mem_stats=True)
    assert render_statsd_lines(before, after, P, options) == [
        f"{P}mem.heap_objects:5|g",
        f"{P}mem.heap_idle_bytes:0|g",
        f"{P}mem.heap_in_use_bytes:0|g",
        f"{P}mem.heap_released_bytes:0|g",
        f"{P}mem.gc_pause_usec_100:0|g",
        f"{P}mem.gc_pause_usec_99:12|g",
        f"{P}mem.gc_pause_usec_95:0|g",
        f"{P}mem.next_gc_bytes:4096|g",
        f"{P}mem.gc_runs:3|c",
    ]
    first = render_statsd_lines(None, after, P, options)
    assert first[-1] == f"{P}mem.gc_runs:13|c"


def test_mem_stats_off_or_absent_sends_no_mem_lines() -> None:
    with_memory = _snapshot(topic_stats("t"), memory=memory_stats(heap_objects=5))
    off = render_statsd_lines(None, with_memory, P, _opts(statsd_mem_stats=False))
    absent = render_statsd_lines(None, _snapshot(topic_stats("t")), P, _opts(statsd_mem_stats=True))
    for lines in (off, absent):
        assert lines
        assert not [line for line in lines if ".mem." in line]


def test_exclude_ephemeral_skips_ephemeral_topics_and_channels() -> None:
    snapshot = _snapshot(
        topic_stats("eph#ephemeral", channel_stats("c")),
        topic_stats("t", channel_stats("c#ephemeral"), channel_stats("d")),
    )
    included = render_statsd_lines(None, snapshot, "", _opts())
    assert any(line.startswith("topic.eph#ephemeral.") for line in included)
    assert any(line.startswith("topic.t.channel.c#ephemeral.") for line in included)
    excluded = render_statsd_lines(None, snapshot, "", _opts(statsd_exclude_ephemeral=True))
    assert not [line for line in excluded if "#ephemeral" in line]
    assert "topic.t.channel.d.depth:0|g" in excluded


def test_null_topics_render_nothing() -> None:
    assert render_statsd_lines(None, {"topics": None}, P, _opts()) == []


# --- packing -----------------------------------------------------------------------------


def test_packets_hold_whole_newline_terminated_lines_up_to_the_size() -> None:
    lines = [f"m{i}:{i}|c" for i in range(10)]  # 7 bytes with the newline each
    packets = pack_statsd_packets(lines, 22)
    assert packets == [
        b"m0:0|c\nm1:1|c\nm2:2|c\n",
        b"m3:3|c\nm4:4|c\nm5:5|c\n",
        b"m6:6|c\nm7:7|c\nm8:8|c\n",
        b"m9:9|c\n",
    ]
    assert all(len(packet) <= 22 for packet in packets)
    assert b"".join(packets).decode().splitlines() == lines


def test_a_line_filling_the_packet_exactly_fits() -> None:
    assert pack_statsd_packets(["abcd", "efgh"], 5) == [b"abcd\n", b"efgh\n"]
    assert pack_statsd_packets(["ab", "cd"], 6) == [b"ab\ncd\n"]


def test_an_oversized_line_goes_alone() -> None:
    assert pack_statsd_packets(["a", "x" * 30, "b"], 10) == [b"a\n", b"x" * 30 + b"\n", b"b\n"]


def test_no_lines_no_packets() -> None:
    assert pack_statsd_packets([], 508) == []


def test_default_packet_size_packs_many_lines() -> None:
    snapshot = _snapshot(*[topic_stats(f"topic{i}", channel_stats("ch")) for i in range(20)])
    lines = render_statsd_lines(None, snapshot, P, _opts())
    packets = pack_statsd_packets(lines, 508)
    assert all(len(packet) <= 508 for packet in packets)
    assert len(packets) < len(lines)
    assert [line for packet in packets for line in packet.decode().splitlines()] == lines


# --- the loop ----------------------------------------------------------------------------


async def test_loop_pushes_every_interval_with_deltas(
    autojump_clock: trio.testing.MockClock,
) -> None:
    receiver = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await receiver.bind(("127.0.0.1", 0))
    port = receiver.getsockname()[1]
    counts = iter([5, 12])

    def get_snapshot() -> dict[str, Any]:
        return _snapshot(
            topic_stats("t", message_count=next(counts)), memory=memory_stats(gc_total_runs=1)
        )

    options = NSQDOptions(
        statsd_address=f"127.0.0.1:{port}",
        statsd_interval=10.0,
        statsd_udp_packet_size=64,
        broadcast_address="host.local",
    )
    with receiver:
        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            await nursery.start(statsd_loop, get_snapshot, options)
            first = await receiver.recv(65536)
            assert trio.current_time() - start == pytest.approx(10.0)
            rest: list[bytes] = []
            # topic lines (4) + mem lines (9), a few per 64-byte packet, spread over 9 s
            while b"mem.gc_runs" not in (rest[-1] if rest else first):
                rest.append(await receiver.recv(65536))
            # Go's SpreadWriter: one datagram every (interval - 1 s) / n
            spread_end = 10.0 + 9.0 * len(rest) / (len(rest) + 1)
            assert trio.current_time() - start == pytest.approx(spread_end)
            second_push = await receiver.recv(65536)
            assert trio.current_time() - start == pytest.approx(20.0)
            nursery.cancel_scope.cancel()

    packets = [first, *rest]
    assert all(len(packet) <= 64 for packet in packets)
    lines = b"".join(packets).decode().splitlines()
    assert lines[0] == "nsq.host_local_0.topic.t.message_count:5|c"
    assert "nsq.host_local_0.mem.gc_runs:1|c" in lines
    assert second_push.decode().splitlines()[0] == "nsq.host_local_0.topic.t.message_count:7|c"


async def test_loop_uses_the_listening_port_when_broadcast_port_is_unset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    receiver = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await receiver.bind(("127.0.0.1", 0))
    options = NSQDOptions(
        statsd_address=f"127.0.0.1:{receiver.getsockname()[1]}",
        statsd_interval=1.0,
        statsd_mem_stats=False,
        broadcast_address="h",
    )
    with receiver:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_loop_with_port, options, 4151)
            packet = await receiver.recv(65536)
            nursery.cancel_scope.cancel()
    assert packet.startswith(b"nsq.h_4151.topic.t.message_count:0|c\n")


async def _loop_with_port(options: NSQDOptions, port: int) -> None:
    await statsd_loop(lambda: _snapshot(topic_stats("t")), options, http_port=port)


async def test_loop_survives_a_bad_address_and_a_failing_snapshot(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await receiver.bind(("127.0.0.1", 0))
    good_address = f"127.0.0.1:{receiver.getsockname()[1]}"
    options = NSQDOptions(
        statsd_address="not-an-address", statsd_interval=5.0, statsd_mem_stats=False
    )
    calls = 0

    def get_snapshot() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("stats exploded")
        return _snapshot(topic_stats("t", message_count=calls))

    caplog.set_level(logging.INFO, logger="trionsq.nsqd")
    with receiver:
        async with trio.open_nursery() as nursery:
            await nursery.start(statsd_loop, get_snapshot, options)
            await trio.sleep(5.5)  # first push: the address does not parse
            assert calls == 0
            options.statsd_address = good_address
            await trio.sleep(5.0)  # second push: the snapshot raises
            assert calls == 1
            packet = await receiver.recv(65536)  # third push goes through
            nursery.cancel_scope.cancel()
    assert b"topic.t.message_count:2|c" in packet
    messages = [record.getMessage() for record in caplog.records]
    assert any("failed to create UDP socket to statsd(not-an-address)" in m for m in messages)
    assert any("push failed" in m for m in messages)


async def test_send_errors_are_logged_and_the_loop_goes_on(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # a port nobody listens on: Linux reports ECONNREFUSED on the next send of a connected
    # UDP socket; whatever the platform does, the loop must keep running
    probe = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await probe.bind(("127.0.0.1", 0))
    dead_port = probe.getsockname()[1]
    probe.close()
    pushes = 0

    def get_snapshot() -> dict[str, Any]:
        nonlocal pushes
        pushes += 1
        return _snapshot(*[topic_stats(f"t{i}") for i in range(10)])

    options = NSQDOptions(
        statsd_address=f"127.0.0.1:{dead_port}",
        statsd_interval=3.0,
        statsd_udp_packet_size=40,
        statsd_mem_stats=False,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(statsd_loop, get_snapshot, options)
        await trio.sleep(10.0)
        nursery.cancel_scope.cancel()
    assert pushes == 3
    if sys.platform == "linux":
        failures = [r for r in caplog.records if "failed to send" in r.getMessage()]
        assert len(failures) == 3  # once per push, not once per datagram


async def test_non_positive_interval_returns_instead_of_spinning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = NSQDOptions(statsd_address="127.0.0.1:1", statsd_interval=0.0)
    with trio.fail_after(1):
        await statsd_loop(lambda: _snapshot(), options)
    assert any("statsd-interval must be positive" in r.getMessage() for r in caplog.records)
