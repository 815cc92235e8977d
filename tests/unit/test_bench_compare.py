"""`bench/compare` without timing: argument parsing, Go's bench line, the run order, the
medians, ratios and table. (Real runs: tests/integration/test_bench_compare_run.py.)
"""

from __future__ import annotations

import math

import pytest

from trionsq.apps.bench import compare
from trionsq.apps.bench.common import BenchError
from trionsq.apps.bench.compare import (
    Results,
    Server,
    format_cell,
    format_table,
    go_duration,
    parse_args,
    parse_go_bench_line,
    schedule,
    select,
)

DASH = "\u2013"  # between min and max
GO_WRITER_LINE = (
    "[bench_writer] 2024/05/01 10:00:00 duration: 10.000532s - 117.310mb/s"
    " - 1230000.000ops/s - 0.813us/op\n"
)


def test_parse_args_defaults() -> None:
    args = parse_args([])
    assert args.go_nsqd is None
    assert args.rounds == 3
    assert args.runfor == 10.0
    assert args.only is None
    assert args.json is False


def test_parse_args_go_and_selection() -> None:
    args = parse_args(
        [
            "--go-nsqd=/go/nsqd",
            "--go-bench-writer=/go/bw",
            "--go-bench-reader=/go/br",
            "--rounds=5",
            "--runfor=1m30s",
            "--only=throughput, latency",
            "--json",
        ]
    )
    assert (args.go_nsqd, args.go_bench_writer, args.go_bench_reader) == (
        "/go/nsqd",
        "/go/bw",
        "/go/br",
    )
    assert args.rounds == 5
    assert args.runfor == 90.0
    assert args.only == ["throughput", "latency"]
    servers = compare.servers_from(args)
    assert [s.name for s in servers] == ["trionsq", "go"]
    assert servers[1].argv == ("/go/nsqd",)
    assert servers[0].argv[-3:] == ("-m", "trionsq", "nsqd")
    opts = compare.options_from(args)
    assert opts.clients.go_writer == "/go/bw" and opts.clients.go_reader == "/go/br"


def test_parse_args_trionsq_command_is_split() -> None:
    args = parse_args(["--trionsq-nsqd", "/venv/bin/python -m trionsq nsqd --log-level=warn"])
    servers = compare.servers_from(args)
    assert [s.name for s in servers] == ["trionsq"]
    assert servers[0].argv == ("/venv/bin/python", "-m", "trionsq", "nsqd", "--log-level=warn")


@pytest.mark.parametrize(
    "argv", [["--only=nope"], ["--rounds=0"], ["--runfor=ten"], ["--background=-1"]]
)
def test_parse_args_rejects(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_go_bench_line() -> None:
    r = parse_go_bench_line("some log line\n" + GO_WRITER_LINE)
    assert r.duration == pytest.approx(10.000532)
    assert r.mb_per_s == pytest.approx(117.31)
    assert r.ops_per_s == 1_230_000.0
    assert r.us_per_op == pytest.approx(0.813)
    assert r.msgs == round(1_230_000 * 10.000532)


def test_go_bench_line_durations_and_no_messages() -> None:
    r = parse_go_bench_line("duration: 1m0.5s - 0.000mb/s - 0.000ops/s - +Infus/op")
    assert r.duration == 60.5
    assert r.msgs == 0
    assert math.isinf(r.us_per_op)
    assert parse_go_bench_line("duration: 999.5ms - 1.0mb/s - 2.5ops/s - 1.0us/op").duration == (
        pytest.approx(0.9995)
    )


def test_go_bench_line_missing() -> None:
    with pytest.raises(BenchError):
        parse_go_bench_line("panic: dial tcp 127.0.0.1:1: connection refused")


def test_go_duration() -> None:
    assert go_duration(10.0) == "10s"
    assert go_duration(1.5) == "1.5s"


def test_select() -> None:
    assert [m.key for m in select(["throughput"])] == [
        "throughput-mem",
        "throughput-default",
        "throughput-disk",
    ]
    # pub-rate comes from the 30k/s latency run: asked twice, run once.
    assert [m.key for m in select(["latency", "pub-rate"])] == ["latency-5k", "latency-30k"]
    assert "pub_rate" in select(["pub-rate"])[0].figures
    assert len(select(None)) == len(compare.MEASUREMENTS)
    with pytest.raises(ValueError):
        select(["bogus"])


def test_schedule_alternates_servers_round_by_round() -> None:
    ours, go = Server("trionsq", ("a",)), Server("go", ("b",))
    measurements = select(["memory", "idle"])
    order = [(m.key, r, s.name) for m, r, s in schedule(measurements, 2, [ours, go])]
    assert order == [
        ("memory", 0, "trionsq"),
        ("memory", 0, "go"),
        ("memory", 1, "trionsq"),
        ("memory", 1, "go"),
        ("idle", 0, "trionsq"),
        ("idle", 0, "go"),
        ("idle", 1, "trionsq"),
        ("idle", 1, "go"),
    ]


def test_format_cell() -> None:
    assert format_cell([3.0, 1.0, 2.0]) == f"2 (1{DASH}3)"
    assert format_cell([1234567.0]) == "1,234,567"
    assert format_cell([0.5, None, 0.25], 2) == f"0.38 (0.25{DASH}0.50) (1 of 3 failed)"
    assert format_cell([None]) == "error (1 of 1 failed)"
    assert format_cell([]) == "-"


def _results() -> Results:
    results = Results(["trionsq", "go"])
    for ours, theirs in ((600_000.0, 1_200_000.0), (500_000.0, 1_000_000.0), (700_000.0, None)):
        results.add("trionsq", ["publish_mem"], {"publish_mem": ours})
        results.add("go", ["publish_mem"], None if theirs is None else {"publish_mem": theirs})
    results.add("trionsq", ["rss_per_msg"], {"rss_per_msg": 180.0})
    results.add("go", ["rss_per_msg"], {"rss_per_msg": 250.0})
    return results


def test_results_median_and_ratio() -> None:
    results = _results()
    assert results.median("publish_mem", "trionsq") == 600_000.0
    assert results.median("publish_mem", "go") == 1_100_000.0  # two good rounds
    assert results.ratio("publish_mem") == pytest.approx(600 / 1100)
    assert results.ratio("rss_per_msg") == pytest.approx(0.72)
    doc = results.as_json()
    assert list(doc) == ["publish_mem", "rss_per_msg"]
    assert doc["publish_mem"]["go"]["values"] == [1_200_000.0, 1_000_000.0, None]
    assert doc["publish_mem"]["trionsq"]["min"] == 500_000.0


def test_format_table_two_servers() -> None:
    lines = format_table(_results()).splitlines()
    assert lines[0].split() == ["figure", "trionsq", "go", "trionsq/go", "better"]
    assert set(lines[1]) <= {"-", " "}
    publish = lines[2]
    assert publish.startswith("publish, memory queue (msg/s)")
    assert f"600,000 (500,000{DASH}700,000)" in publish
    assert f"1,100,000 (1,000,000{DASH}1,200,000) (1 of 3 failed)" in publish
    assert publish.split()[-2:] == ["0.55", "higher"]
    assert lines[3].startswith("RSS per queued message (B)")
    assert lines[3].split()[-2:] == ["0.72", "lower"]


def test_format_table_one_server() -> None:
    results = Results(["trionsq"])
    results.add("trionsq", ["idle_cpu", "idle_rss"], {"idle_cpu": 0.125, "idle_rss": 55.25})
    lines = format_table(results).splitlines()
    assert lines[0].split() == ["figure", "trionsq"]
    assert lines[2].endswith("0.12") or lines[2].endswith("0.13")
    assert lines[3].endswith("55.2") or lines[3].endswith("55.3")


def test_figure_labels_follow_parameters() -> None:
    figures = compare.figures_for(topics=20, channels=3, conns=50)
    assert figures["idle_cpu"].label == "idle CPU, 20 topics x 3 channels"
    assert figures["conn_bytes"].label == "RSS per idle connection (50)"
    assert not figures["idle_cpu"].higher_is_better and figures["publish_mem"].higher_is_better


def test_lower_bound_is_marked() -> None:
    results = Results(["trionsq", "go"])
    results.add("trionsq", ["deliver_default"], {"deliver_default": 200.0})
    drained = {"deliver_default": 100.0, "deliver_default" + compare.LOWER_BOUND: 1.0}
    results.add("go", ["deliver_default"], drained)
    table = format_table(results).splitlines()
    assert table[2].split()[-5:] == ["200", "100", "*", "2.00", "higher"]
    assert table[-1].startswith("* a lower bound")
    assert results.as_json()["deliver_default"]["go"]["lower_bound"] is True
    assert results.as_json()["deliver_default"]["trionsq"]["lower_bound"] is False


def test_background_processes_spin_during_the_block_and_are_gone_after() -> None:
    """--background N: N processes using a core each while the round runs, none after."""
    import time

    from trionsq.apps.bench.common import cpu_seconds

    assert compare.options_from(parse_args(["--background", "2"])).background == 2
    assert compare.options_from(parse_args([])).background == 0
    with compare.Background(2) as background:
        procs = list(background.procs)
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        deadline = time.monotonic() + 30
        while min(cpu_seconds(p.pid) for p in procs) < 0.2:  # each burns CPU (a busy core)
            assert time.monotonic() < deadline, "the background processes do not spin"
            time.sleep(0.05)
    assert all(p.poll() is not None for p in procs)
