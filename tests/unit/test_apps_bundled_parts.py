"""The bundled apps' pure parts: flags and validation, go-nsq option pass-through, file names
and rotation (to_file), record splitting (to_nsq), URL/header handling (to_http), JSON
filtering (nsq_to_nsq), host picking and the progress line."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pytest

from trionsq.apps import nsq_to_nsq, tail, to_file, to_http, to_nsq
from trionsq.apps.common import AppError, Progress, config_options, parse_flags
from trionsq.apps.hostpool import HostPool, RoundRobin
from trionsq.options import FlagError

# -- flags ------------------------------------------------------------------------------


def test_tail_flags_defaults_and_validation() -> None:
    values, _ = parse_flags(
        tail.tail_flagset(),
        ["--topic=a", "-topic", "b", "--nsqd-tcp-address=h:1", "-n", "5", "--print-topic"],
    )
    options = tail.build_options(values)
    assert options.topics == ["a", "b"]
    assert options.max_in_flight == 5  # -n caps max-in-flight
    assert options.print_topic
    assert options.channel.startswith("tail") and options.channel.endswith("#ephemeral")
    assert len(options.channel) == len("tail000000#ephemeral")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topic=a"], "--nsqd-tcp-address or --lookupd-http-address required"),
        (
            ["--topic=a", "--nsqd-tcp-address=h:1", "--lookupd-http-address=h:2"],
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        ),
        (["--nsqd-tcp-address=h:1"], "--topic required"),
        (["--topic=a", "--nsqd-tcp-address=h:1", "--consumer-opt=bogus,1"], "invalid option"),
    ],
)
def test_tail_rejects(argv: list[str], message: str) -> None:
    values, _ = parse_flags(tail.tail_flagset(), argv)
    with pytest.raises(AppError, match=message):
        tail.build_options(values)


def test_repeatable_flags_do_not_split_on_commas() -> None:
    values, _ = parse_flags(
        tail.tail_flagset(),
        ["--topic=a", "--nsqd-tcp-address=h:1", "--consumer-opt=msg_timeout,2m"],
    )
    assert values["consumer_opts"] == ["msg_timeout,2m"]
    assert tail.build_options(values).consumer_options == {"msg_timeout": 120.0}


def test_unknown_flag_is_a_flag_error() -> None:
    with pytest.raises(FlagError, match="flag provided but not defined: -nope"):
        parse_flags(to_file.to_file_flagset(), ["--nope"])


def test_config_options_maps_go_nsq_names() -> None:
    assert config_options(
        [
            "max_attempts,10",
            "default_requeue_delay,1s",
            "backoff_multiplier,10ms",
            "snappy",
            "tls_root_ca_file,/ca.pem",
            "lookupd_poll_jitter,0.5",
        ]
    ) == {
        "max_attempts": 10,
        "requeue_delay": 1.0,
        "backoff_multiplier": 0.01,
        "snappy": True,
        "tls_cafile": "/ca.pem",
        "lookupd_poll_jitter": 0.5,
    }
    # consumer-only knobs are accepted but unused by a producer
    assert config_options(["max_in_flight,5", "deflate,true"], producer=True) == {"deflate": True}
    assert config_options(["read_timeout,1m"]) == {}  # accepted, no effect
    with pytest.raises(AppError, match="invalid value"):
        config_options(["max_attempts,x"])


def test_to_nsq_validation() -> None:
    def build(*argv: str) -> to_nsq.ToNSQOptions:
        values, _ = parse_flags(to_nsq.to_nsq_flagset(), list(argv))
        return to_nsq.build_options(values)

    with pytest.raises(AppError, match="--topic required"):
        build("--nsqd-tcp-address=h:1")
    with pytest.raises(AppError, match="single byte"):
        build("--topic=t", "--delimiter=ab", "--nsqd-tcp-address=h:1")
    with pytest.raises(AppError, match="--nsqd-tcp-address required"):
        build("--topic=t")
    options = build("--topic=t", "--delimiter=,", "--nsqd-tcp-address=h:1", "--rate=10")
    assert options.delimiter_byte == b"," and options.rate == 10


def test_to_file_validation_and_defaults() -> None:
    def build(*argv: str) -> to_file.ToFileOptions:
        values, _ = parse_flags(to_file.to_file_flagset(), list(argv))
        return to_file.build_options(values)

    options = build("--topic=t", "--nsqd-tcp-address=h:1")
    assert options.channel == "nsq_to_file"
    assert options.work_dir == options.output_dir == "/tmp"
    assert options.sync_interval == 30.0 and options.topic_refresh == 60.0
    with pytest.raises(AppError, match="--topic or --topic-pattern required"):
        build("--nsqd-tcp-address=h:1")
    with pytest.raises(AppError, match="must be specified when no --topic"):
        build("--topic-pattern=x", "--nsqd-tcp-address=h:1")
    with pytest.raises(AppError, match="gzip-level"):
        build("--topic=t", "--nsqd-tcp-address=h:1", "--gzip-level=10")
    with pytest.raises(AppError, match="missing <REV>"):
        build("--topic=t", "--nsqd-tcp-address=h:1", "--rotate-size=10", "--filename-format=x")
    build("--topic-pattern=^a", "--lookupd-http-address=h:1")


def test_to_http_validation() -> None:
    def build(*argv: str) -> to_http.ToHTTPOptions:
        values, _ = parse_flags(to_http.to_http_flagset(), list(argv))
        return to_http.build_options(values)

    base = ("--topic=t", "--nsqd-tcp-address=h:1")
    with pytest.raises(AppError, match="--get or --post required"):
        build(*base)
    with pytest.raises(AppError, match="not both"):
        build(*base, "--get=http://x/%s", "--post=http://y/")
    with pytest.raises(AppError, match="printf string"):
        build(*base, "--get=http://x/")
    with pytest.raises(AppError, match="only used with --post"):
        build(*base, "--get=http://x/%s", "--content-type=text/plain")
    with pytest.raises(AppError, match="--sample"):
        build(*base, "--post=http://x/", "--sample=2")
    with pytest.raises(AppError, match="--header"):
        build(*base, "--post=http://x/", "--header=nocolon")
    options = build(*base, "--post=http://x/", "--header=X-A: 1", "--mode=round-robin")
    assert options.headers == {"X-A": "1"}
    assert options.selected_mode == to_http.MODE_ROUND_ROBIN
    assert build(*base, "--post=http://x/", "--mode=epsilon-greedy").selected_mode == "hostpool"
    assert build(*base, "--post=http://x/", "--mode=other").selected_mode == to_http.MODE_ALL


def test_nsq_to_nsq_validation() -> None:
    def build(*argv: str) -> nsq_to_nsq.ToNSQRelayOptions:
        values, _ = parse_flags(nsq_to_nsq.nsq_to_nsq_flagset(), list(argv))
        return nsq_to_nsq.build_options(values)

    with pytest.raises(AppError, match="--topic and --channel are required"):
        build("--nsqd-tcp-address=h:1")
    with pytest.raises(AppError, match="--destination-nsqd-tcp-address required"):
        build("--topic=t", "--nsqd-tcp-address=h:1")
    with pytest.raises(AppError, match="--destination-topic is invalid"):
        build("--topic=t", "--nsqd-tcp-address=h:1", "--destination-topic=a b")
    options = build("--topic=t", "--nsqd-tcp-address=h:1", "--destination-nsqd-tcp-address=d:1")
    assert not options.round_robin
    assert build(
        "--topic=t", "--nsqd-tcp-address=h:1", "--destination-nsqd-tcp-address=d:1", "--mode=x"
    ).round_robin


# -- to_file ----------------------------------------------------------------------------


def test_strftime_go_table() -> None:
    when = dt.datetime(2024, 3, 5, 7, 8, 9, tzinfo=dt.UTC)
    assert to_file.strftime("%Y-%m-%d_%H", when) == "2024-03-05_07"
    assert to_file.strftime("%y%M%S %% %Z %z", when) == "240809 % UTC +0000"
    assert to_file.strftime("%j%", when) == "%j%"  # unknown directives stay literal


def test_filename_format() -> None:
    options = to_file.ToFileOptions(topic_pattern="", topics=["t"])
    plain = to_file.compute_filename_format(options, "t", hostname="web1.example.com", pid=42)
    assert plain == "t.web1.<DATETIME>.log"  # <REV> dropped when not needed
    options = to_file.ToFileOptions(
        gzip=True,
        filename_format="<TOPIC>/<HOST>.<PID><REV>.<DATETIME>.log",
        host_identifier="<SHORT_HOST>-<HOSTNAME>",
    )
    assert (
        to_file.compute_filename_format(options, "t", hostname="web1.example.com", pid=42)
        == "t/web1-web1.example.com.42<REV>.<DATETIME>.log.gz"
    )
    assert to_file.rev_name("a<REV>.log", 3) == "a-000003.log"
    options = to_file.ToFileOptions(work_dir="/w", output_dir="/o", filename_format="<TOPIC>")
    with pytest.raises(AppError, match="missing <REV>"):
        to_file.compute_filename_format(options, "t")


def _reason(**overrides: Any) -> str | None:
    kwargs: dict[str, Any] = {
        "is_open": True,
        "filename": "a",
        "current_filename": "a",
        "rotate_interval": 0.0,
        "opened_for": 100.0,
        "rotate_size": 0,
        "filesize": 1000,
    }
    kwargs.update(overrides)
    return to_file.rotation_reason(**kwargs)


def test_rotation_decisions() -> None:
    assert _reason() is None
    assert _reason(is_open=False) == "no file open"
    assert _reason(current_filename="b") == "new filename b"
    assert _reason(rotate_interval=60.0) is not None
    assert _reason(rotate_interval=600.0) is None
    assert _reason(rotate_size=1000) is None  # only when strictly bigger
    assert _reason(rotate_size=999) == "1000 bytes (> 999)"


def test_topic_pattern_is_a_search() -> None:
    assert to_file.topic_allowed("", "anything")
    assert to_file.topic_allowed("ev", "events")
    assert not to_file.topic_allowed("^x", "events")


def test_file_logger_writes_gzip_members_and_moves(tmp_path: Any) -> None:
    import gzip

    options = to_file.ToFileOptions(
        topics=["t"],
        gzip=True,
        output_dir=str(tmp_path / "o"),
        work_dir=str(tmp_path / "w"),
        nsqd_tcp_addresses=["h:1"],
        host_identifier="h",
        datetime_format="D",
    )
    logger = to_file.FileLogger(options, "t")
    logger.update_file()
    logger.write(b"one\n")
    logger.sync()  # ends a gzip member
    logger.write(b"two\n")
    logger.close_file()
    (tmp_path / "o" / "t.h-000001.D.log.gz").write_bytes(b"taken")
    logger.update_file()  # same name: next rev; rev 1 exists in the output dir -> rev 2
    assert logger.out_path.endswith("t.h-000002.D.log.gz")
    logger.write(b"three\n")
    logger.close_file()
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "t.h-000000.D.log.gz",
        "t.h-000001.D.log.gz",
        "t.h-000002.D.log.gz",
    ]
    assert gzip.decompress((tmp_path / "o" / "t.h-000000.D.log.gz").read_bytes()) == (b"one\ntwo\n")
    assert not list((tmp_path / "w").iterdir())


# -- to_nsq -----------------------------------------------------------------------------


def test_record_splitter() -> None:
    splitter = to_nsq.RecordSplitter(b"\n")
    assert splitter.feed(b"a\nb") == [b"a"]
    assert splitter.feed(b"c\n\n\nd") == [b"bc"]  # empty records skipped
    assert splitter.feed(b"") == []
    assert splitter.end() == [b"d"]
    assert splitter.end() == []
    comma = to_nsq.RecordSplitter(b",")
    assert comma.feed(b"x,y,") == [b"x", b"y"]
    assert comma.end() == []


def test_batches_and_token_bucket() -> None:
    records = [b"x"] * (to_nsq.BATCH_COUNT + 1)
    assert [len(b) for b in to_nsq._batches(records)] == [to_nsq.BATCH_COUNT, 1]
    now = [0.0]
    bucket = to_nsq.TokenBucket(10, clock=lambda: now[0])
    assert bucket.delay() == 0
    bucket.take()
    assert bucket.delay() == pytest.approx(0.1)
    now[0] = 5.0
    assert bucket.delay() == 0 and bucket.balance == 10  # banked at most one second


# -- to_http ----------------------------------------------------------------------------


def test_get_url_escapes_like_go_query_escape() -> None:
    assert to_http.get_url("http://h/p?d=%s", b"a b&c/~") == "http://h/p?d=a+b%26c%2F~"


def test_parse_custom_headers() -> None:
    assert to_http.parse_custom_headers(["A: 1", "B:x:y"]) == {"A": "1", "B": "x:y"}
    for bad in ("A", ":1", "A: "):
        with pytest.raises(ValueError):
            to_http.parse_custom_headers([bad])


# -- nsq_to_nsq -------------------------------------------------------------------------


def test_should_pass() -> None:
    sp = nsq_to_nsq.should_pass
    assert sp({}, "", "") == (True, False)
    assert sp({"a": 1}, "a", "") == (True, False)
    assert sp({}, "a", "") == (False, False)
    assert sp({}, "a", "v") == (False, True)  # missing field with a value: backoff
    assert sp({"a": "v"}, "a", "v") == (True, False)
    assert sp({"a": "w"}, "a", "v") == (False, False)
    assert sp({"a": 2}, "a", "2.0") == (True, False)
    assert sp({"a": 2.5}, "a", "2.5") == (True, False)
    assert sp({"a": True}, "a", "1") == (False, False)
    assert sp({"a": [1]}, "a", "x") == (False, False)


def test_filter_message_as_go_marshal() -> None:
    raw = b'{"b": 2.0, "a": "<&>", "c": 1.5, "d": true}'
    js = json.loads(raw)
    assert nsq_to_nsq.filter_message(js, raw, []) is raw
    assert (
        nsq_to_nsq.filter_message(js, raw, ["d", "c", "b", "a", "zz"])
        == b'{"a":"\\u003c\\u0026\\u003e","b":2,"c":1.5,"d":true}'
    )


def test_transform() -> None:
    options = nsq_to_nsq.ToNSQRelayOptions(require_json_field="a", require_json_value="x")
    assert nsq_to_nsq.transform(options, b'{"a":"x"}') == b'{"a":"x"}'
    assert nsq_to_nsq.transform(options, b'{"a":"y"}') is None
    assert nsq_to_nsq.transform(options, b"[1]") is None  # not an object: dropped
    with pytest.raises(nsq_to_nsq.Backoff):
        nsq_to_nsq.transform(options, b'{"b":1}')
    plain = nsq_to_nsq.ToNSQRelayOptions()
    assert nsq_to_nsq.transform(plain, b"anything") == b"anything"


# -- shared -----------------------------------------------------------------------------


def test_round_robin_and_host_pool() -> None:
    rr = RoundRobin(["a", "b", "c"])
    assert [rr.get() for _ in range(4)] == ["b", "c", "a", "b"]
    now = [0.0]
    pool = HostPool(["a", "b"], clock=lambda: now[0])
    assert [pool.get() for _ in range(3)] == ["a", "b", "a"]
    pool.mark("a", ok=False)
    assert [pool.get() for _ in range(2)] == ["b", "b"]
    now[0] = 31.0
    assert "a" in {pool.get(), pool.get()}  # retried after the delay
    pool.mark("a", ok=False)
    pool.mark("b", ok=False)
    assert pool.get() in ("a", "b")  # all dead: revived


def test_progress_line_and_tty_only() -> None:
    stream = io.StringIO()
    progress = Progress(["sent"], stream=stream)
    assert not progress.enabled
    progress.add("sent", 10)
    line = progress.line(now=progress._last_time + 2.0)
    assert line == "sent 10 (5/s)"
