"""`trionsq bench`: flag parsing, durations, percentile maths and the reader's frame scan."""

from __future__ import annotations

import pytest

from trionsq.apps.bench import parse_args
from trionsq.apps.bench.common import (
    format_throughput,
    parse_address,
    parse_duration,
    percentile,
)
from trionsq.apps.bench.latency import summarize
from trionsq.apps.bench.reader import parse_batch
from trionsq.protocol import encode_error, encode_message_frame, encode_response


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0),
        ("10", 10.0),
        ("2.5", 2.5),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("1h", 3600.0),
        ("250us", 0.00025),
        ("1.5s", 1.5),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10x", "-1", "10s5", "ten"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert parse_address("[::1]:4150") == ("::1", 4150)
    assert parse_address(":4150") == ("127.0.0.1", 4150)
    assert parse_address("localhost") == ("localhost", 4150)


def test_defaults_to_all_mode_with_nsq_defaults() -> None:
    args = parse_args([])
    assert args.mode == "all"
    assert (args.size, args.batch_size, args.runfor, args.rdy) == (100, 200, 10.0, 2500)
    assert args.nsqd_tcp_address is None
    assert parse_args(["--runfor", "3s"]).mode == "all"


def test_mode_flags() -> None:
    args = parse_args(
        [
            "writer",
            "--nsqd-tcp-address=127.0.0.1:4150",
            "--topic=t",
            "--size=200",
            "--batch-size=50",
            "--runfor=1m",
            "--procs=4",
            "--count=1_000",
            "--nsqd-arg=--mem-queue-size=5",
            "--nsqd-arg=--msg-timeout=1s",
        ]
    )
    assert args.mode == "writer"
    assert args.nsqd_tcp_address == "127.0.0.1:4150"
    assert (args.topic, args.size, args.batch_size, args.runfor) == ("t", 200, 50, 60.0)
    assert (args.procs, args.count) == (4, 1000)
    assert args.nsqd_arg == ["--mem-queue-size=5", "--msg-timeout=1s"]


@pytest.mark.parametrize("argv", [["writer", "--runfor=abc"], ["reader", "--procs=0"]])
def test_bad_flags_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 50
    assert percentile(values, 90) == 90
    assert percentile(values, 99) == 99
    assert percentile(values, 99.9) == 100
    assert percentile(values, 100) == 100
    assert percentile([7], 50) == 7
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile([1, 2, 3, 4], 75) == 3
    assert percentile([1, 2, 3, 4], 76) == 4


def test_percentile_thousand_values() -> None:
    values = list(range(1000))
    assert percentile(values, 99.9) == 998
    assert percentile(values, 99) == 989
    assert percentile(values, 50) == 499


@pytest.mark.parametrize("p", [0, -1, 101])
def test_percentile_range(p: float) -> None:
    with pytest.raises(ValueError):
        percentile([1, 2], p)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summarize_in_microseconds() -> None:
    r = summarize([(i + 1) * 1000 for i in range(1000)][::-1], sent=1000, rate=100.0)
    assert (r.count, r.p50, r.p90, r.p99, r.p999, r.max) == (1000, 500, 900, 990, 999, 1000)


def test_format_throughput() -> None:
    line = format_throughput("writer", 10.0, 3_000_000, 100)
    assert line == "writer: 10.0s, 3,000,000 msgs, 300,000 msgs/s, 28.61 MB/s"


def test_parse_batch() -> None:
    frames = [encode_message_frame(b"%016x" % i, 123, 1, b"x" * 100) for i in range(5)]
    buf = b"".join(frames) + encode_response(b"_heartbeat_") + frames[0][:20]
    ids: list[bytes] = []
    pos, heartbeats = parse_batch(buf, 0, ids)
    assert ids == [b"%016x" % i for i in range(5)]
    assert heartbeats == 1
    assert buf[pos:] == frames[0][:20]


def test_parse_batch_error_frame() -> None:
    from trionsq.apps.bench.common import BenchError

    with pytest.raises(BenchError, match="E_FIN_FAILED"):
        parse_batch(encode_error(b"E_FIN_FAILED x"), 0, [])


def test_transport_flags() -> None:
    args = parse_args(["transports"])
    assert args.transports == ("plain", "snappy", "deflate", "tls")
    assert (args.transport, args.deflate_level, args.rounds) == ("plain", 6, 1)
    args = parse_args(["transports", "--transports", "tls+deflate,plain,snappy"])
    assert args.transports == ("plain", "tls+deflate", "snappy")
    assert parse_args(["reader", "--transport", "tls+snappy"]).transport == "tls+snappy"


@pytest.mark.parametrize(
    "argv", [["transports", "--transports", "gzip"], ["reader", "--transport", "ssl"]]
)
def test_transport_flags_reject_unknown_names(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
