"""Go `flag`-package syntax, Go value parsers and config-file coercion in trionsq.options."""

from __future__ import annotations

import math

import pytest

from trionsq.options import (
    BOOL,
    DURATION,
    FLOAT,
    FLOATS,
    INT,
    STRING,
    STRINGS,
    Flag,
    FlagError,
    FlagSet,
    GoParseError,
    HelpRequested,
    coerce_config_value,
    format_duration,
    load_config,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    resolve,
)


def _flagset() -> FlagSet:
    return FlagSet(
        "demo",
        [
            Flag("tcp-address", STRING, "0.0.0.0:4150", "listen address"),
            Flag("mem-queue-size", INT, 10000, "queue size"),
            Flag("deflate", BOOL, True, "deflate"),
            Flag("verbose", BOOL, False, "verbose", cfg=None),
            Flag("ratio", FLOAT, 0.25, "a float"),
            Flag("msg-timeout", DURATION, 60.0, "timeout"),
            Flag(
                "lookupd-tcp-address",
                STRINGS,
                [],
                "lookupd",
                field="lookupds",
                cfg="nsqlookupd_tcp_addresses",
            ),
            Flag("pct", FLOATS, [], "percentiles", sort_desc=True),
            Flag("node-id", INT, 7, "node id", field="node_id", cfg="id"),
        ],
    )


def _parse(*argv: str) -> dict[str, object]:
    return _flagset().parse(list(argv)).values


# --- value parsers -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_parse_bool_true(text: str) -> None:
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_parse_bool_false(text: str) -> None:
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["", "yes", "tRUE", "2", " true", "on"])
def test_parse_bool_rejects(text: str) -> None:
    with pytest.raises(GoParseError, match="parse error"):
        parse_bool(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("-42", -42),
        ("+7", 7),
        ("0x1F", 31),
        ("0X1f", 31),
        ("010", 8),
        ("0o17", 15),
        ("0b101", 5),
        ("1_000", 1000),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_parse_int(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5", "08", "0x", " 1", "1 ", "1__0", "_1", "-"])
def test_parse_int_syntax_errors(text: str) -> None:
    with pytest.raises(GoParseError, match=r"^parse error$"):
        parse_int(text)


@pytest.mark.parametrize("text", ["9223372036854775808", "-9223372036854775809", "0x" + "f" * 17])
def test_parse_int_range_errors(text: str) -> None:
    with pytest.raises(GoParseError, match=r"^value out of range$"):
        parse_int(text)


def test_parse_float() -> None:
    assert parse_float("0.99") == 0.99
    assert parse_float("1") == 1.0
    assert parse_float(".5") == 0.5
    assert parse_float("1e-2") == 0.01
    assert parse_float("0x1p-2") == 0.25
    assert parse_float("+Inf") == math.inf
    assert math.isnan(parse_float("NaN"))
    for bad in ("", "abc", "1,5", " 1", "1.2.3"):
        with pytest.raises(GoParseError, match="parse error"):
            parse_float(bad)
    with pytest.raises(GoParseError, match="value out of range"):
        parse_float("1e400")


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("-0", 0),
        ("60s", 60 * 10**9),
        ("1h", 3600 * 10**9),
        ("250ms", 250 * 10**6),
        ("1m30s", 90 * 10**9),
        ("1.5h", 5400 * 10**9),
        ("300us", 300_000),
        ("300\u00b5s", 300_000),
        ("300\u03bcs", 300_000),
        ("10ns", 10),
        ("1h2m3s4ms5us6ns", 3723004005006),
        (".5s", 5 * 10**8),
        ("1.s", 10**9),
        ("-1.5s", -1_500_000_000),
        ("+2m", 120 * 10**9),
        ("0s", 0),
        ("2562047h47m16.854775807s", 2**63 - 1),
    ],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("60", 'time: missing unit in duration "60"'),
        ("1.5", 'time: missing unit in duration "1.5"'),
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        ("1S", 'time: unknown unit "S" in duration "1S"'),
        ("s", 'time: invalid duration "s"'),
        (".s", 'time: invalid duration ".s"'),
        ("1s 2s", 'time: unknown unit "s " in duration "1s 2s"'),
        ("-", 'time: invalid duration "-"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
    ],
)
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(GoParseError) as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (60 * 10**9, "1m0s"),
        (250 * 10**6, "250ms"),
        (25 * 10**6, "25ms"),
        (2 * 10**9, "2s"),
        (3600 * 10**9, "1h0m0s"),
        (90 * 10**9, "1m30s"),
        (1_500_000_000, "1.5s"),
        (1500, "1.5\u00b5s"),
        (7, "7ns"),
        (-2 * 10**9, "-2s"),
    ],
)
def test_format_duration(ns: int, text: str) -> None:
    assert format_duration(ns) == text


# --- flag syntax -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-tcp-address=1.2.3.4:5"],
        ["--tcp-address=1.2.3.4:5"],
        ["-tcp-address", "1.2.3.4:5"],
        ["--tcp-address", "1.2.3.4:5"],
    ],
)
def test_string_flag_forms(argv: list[str]) -> None:
    assert _parse(*argv)["tcp_address"] == "1.2.3.4:5"


def test_value_may_contain_equals_and_be_empty() -> None:
    assert _parse("--tcp-address=a=b")["tcp_address"] == "a=b"
    assert _parse("--tcp-address=")["tcp_address"] == ""


def test_separate_value_may_start_with_dash() -> None:
    assert _parse("-tcp-address", "-x")["tcp_address"] == "-x"


def test_repeated_single_flag_keeps_last() -> None:
    assert _parse("--mem-queue-size=1", "--mem-queue-size", "2")["mem_queue_size"] == 2


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["-deflate"], True),
        (["--deflate"], True),
        (["-deflate=false"], False),
        (["--deflate=0"], False),
        (["--deflate=f"], False),
        (["--deflate=FALSE"], False),
        (["--deflate=False"], False),
        (["--deflate=1"], True),
        (["--deflate=t"], True),
        (["--deflate=TRUE"], True),
        (["--deflate=True"], True),
    ],
)
def test_bool_forms(argv: list[str], value: bool) -> None:
    assert _parse(*argv)["deflate"] is value


def test_bool_never_consumes_next_argument() -> None:
    parsed = _flagset().parse(["--deflate", "false", "--mem-queue-size=5"])
    assert parsed.values == {"deflate": True}
    assert parsed.args == ["false", "--mem-queue-size=5"]


def test_bad_bool_value() -> None:
    with pytest.raises(FlagError) as info:
        _parse("--deflate=yes")
    assert str(info.value) == 'invalid boolean value "yes" for -deflate: parse error'


def test_int_flag_bases() -> None:
    assert _parse("--mem-queue-size=0x10")["mem_queue_size"] == 16
    assert _parse("--mem-queue-size", "-5")["mem_queue_size"] == -5


def test_duration_and_float_flags() -> None:
    values = _parse("--msg-timeout=1m30s", "--ratio", "0.5")
    assert values["msg_timeout"] == 90.0
    assert values["ratio"] == 0.5
    assert _parse("--msg-timeout=250ms")["msg_timeout"] == 0.25


def test_list_flags_accumulate() -> None:
    values = _parse(
        "--lookupd-tcp-address=a:1", "-lookupd-tcp-address", "b:2", "--lookupd-tcp-address=c:3,d:4"
    )
    assert values["lookupds"] == ["a:1", "b:2", "c:3", "d:4"]


def test_float_list_comma_and_repeat_sorted_descending() -> None:
    values = _parse("--pct=0.5,0.99", "--pct", "1.0")
    assert values["pct"] == [1.0, 0.99, 0.5]


def test_double_dash_ends_flags() -> None:
    parsed = _flagset().parse(["--deflate=false", "--", "--mem-queue-size=5", "x"])
    assert parsed.values == {"deflate": False}
    assert parsed.args == ["--mem-queue-size=5", "x"]


def test_stops_at_first_non_flag() -> None:
    parsed = _flagset().parse(["--mem-queue-size=5", "pos", "--deflate=false"])
    assert parsed.values == {"mem_queue_size": 5}
    assert parsed.args == ["pos", "--deflate=false"]
    assert _flagset().parse(["-", "--deflate"]).args == ["-", "--deflate"]


def test_explicit_records_attrs_in_order() -> None:
    parsed = _flagset().parse(["--node-id=3", "--deflate", "--node-id=4"])
    assert parsed.explicit == ["node_id", "deflate"]
    assert parsed.values["node_id"] == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-foo"], "flag provided but not defined: -foo"),
        (["--foo=1"], "flag provided but not defined: -foo"),
        (["---deflate"], "bad flag syntax: ---deflate"),
        (["-=x"], "bad flag syntax: -=x"),
        (["--=x"], "bad flag syntax: --=x"),
        (["-tcp-address"], "flag needs an argument: -tcp-address"),
        (["--mem-queue-size", "abc"], 'invalid value "abc" for flag -mem-queue-size: parse error'),
        (
            ["--mem-queue-size=99999999999999999999"],
            'invalid value "99999999999999999999" for flag -mem-queue-size: value out of range',
        ),
        (["--msg-timeout=60"], 'invalid value "60" for flag -msg-timeout: parse error'),
        (["--msg-timeout=1x"], 'invalid value "1x" for flag -msg-timeout: parse error'),
        (["--ratio=x"], 'invalid value "x" for flag -ratio: parse error'),
        (["--pct=0.5,x"], 'invalid value "0.5,x" for flag -pct: parse error'),
    ],
)
def test_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as info:
        _flagset().parse(argv)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("arg", ["-h", "-help", "--help", "--h"])
def test_help(arg: str) -> None:
    with pytest.raises(HelpRequested) as info:
        _flagset().parse([arg])
    usage = info.value.usage
    assert usage.startswith("Usage of demo:\n")
    assert '  -tcp-address string\n    \tlisten address (default "0.0.0.0:4150")' in usage
    assert "  -msg-timeout duration\n    \ttimeout (default 1m0s)" in usage
    assert "  -deflate\n    \tdeflate (default true)" in usage
    assert "  -verbose\n    \tverbose\n" in usage
    assert "  -lookupd-tcp-address value\n" in usage


def test_custom_bool_like_flag() -> None:
    def tri(text: str) -> str:
        return "tcp-https" if text == "tcp-https" else str(parse_bool(text)).lower()

    fs = FlagSet("x", [Flag("tls", STRING, "false", "", parse=tri, bool_flag=True)])
    assert fs.parse(["--tls"]).values["tls"] == "true"
    assert fs.parse(["--tls=tcp-https"]).values["tls"] == "tcp-https"
    parsed = fs.parse(["--tls", "false"])
    assert parsed.values["tls"] == "true"
    assert parsed.args == ["false"]


def test_redefined_flag_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="redefined"):
        FlagSet("x", [Flag("a", STRING, ""), Flag("a", INT, 0)])


# --- config files and resolution ---------------------------------------------------------------


def _write(tmp_path, text: str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "cfg.toml"
    path.write_text(text)
    return str(path)


def test_precedence_flag_over_config_over_default(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _write(
        tmp_path,
        'mem_queue_size = 5\ntcp_address = "cfg:1"\nmsg_timeout = "30s"\nunknown_key = 1\n',
    )
    fs = _flagset()
    parsed = fs.parse(["--mem-queue-size=9"])
    resolved = resolve(fs, parsed, load_config(path))
    assert resolved.values["mem_queue_size"] == 9  # command line wins
    assert resolved.values["tcp_address"] == "cfg:1"  # config beats default
    assert resolved.values["msg_timeout"] == 30.0
    assert resolved.values["ratio"] == 0.25  # default
    assert resolved.from_flags == {"mem_queue_size"}
    assert resolved.from_config == {"tcp_address", "msg_timeout"}


def test_explicit_flag_equal_to_default_still_beats_config() -> None:
    fs = _flagset()
    resolved = resolve(fs, fs.parse(["--mem-queue-size=10000"]), {"mem_queue_size": 5})
    assert resolved.values["mem_queue_size"] == 10000


def test_list_flag_on_command_line_replaces_config() -> None:
    fs = _flagset()
    cfg = {"nsqlookupd_tcp_addresses": ["x:1", "y:2"]}
    assert resolve(fs, fs.parse([]), cfg).values["lookupds"] == ["x:1", "y:2"]
    resolved = resolve(fs, fs.parse(["--lookupd-tcp-address=z:3"]), cfg)
    assert resolved.values["lookupds"] == ["z:3"]


def test_cfg_key_and_command_line_only_flags() -> None:
    fs = _flagset()
    resolved = resolve(fs, fs.parse([]), {"id": 12, "node_id": 99, "verbose": True})
    assert resolved.values["node_id"] == 12
    assert resolved.values["verbose"] is False


def test_defaults_are_copies() -> None:
    fs = _flagset()
    values = resolve(fs, fs.parse([]), {}).values
    values["lookupds"].append("mutated")
    assert resolve(fs, fs.parse([]), {}).values["lookupds"] == []


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("msg-timeout", "60s", 60.0),
        ("msg-timeout", "1m30s", 90.0),
        ("msg-timeout", 60000, 60.0),  # integers are milliseconds
        ("msg-timeout", 250, 0.25),
        ("lookupd-tcp-address", ["a:1", "b:2"], ["a:1", "b:2"]),
        ("lookupd-tcp-address", "a:1,b:2", ["a:1", "b:2"]),
        ("lookupd-tcp-address", "a:1", ["a:1"]),
        ("deflate", "false", False),
        ("deflate", "TRUE", True),
        ("deflate", False, False),
        ("deflate", 1, True),
        ("mem-queue-size", 42, 42),
        ("mem-queue-size", "42", 42),
        ("ratio", 1, 1.0),
        ("ratio", "0.5", 0.5),
        ("pct", [0.5, 1], [0.5, 1.0]),
        ("pct", "0.99, 0.5", [0.99, 0.5]),
        ("pct", 0.5, [0.5]),
        ("tcp-address", "h:1", "h:1"),
        ("tcp-address", 4150, "4150"),
    ],
)
def test_config_coercion(name: str, value: object, expected: object) -> None:
    flag = _flagset().lookup(name)
    assert flag is not None
    assert coerce_config_value(flag, value) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("msg-timeout", "abc", 'invalid value "abc" for config key msg_timeout: time: invalid'),
        ("msg-timeout", 1.5, "invalid value 1.5 for config key msg_timeout: invalid value type"),
        ("msg-timeout", True, "invalid value true for config key msg_timeout"),
        ("mem-queue-size", "x", 'invalid value "x" for config key mem_queue_size: parse error'),
        ("mem-queue-size", 1.5, "invalid value 1.5 for config key mem_queue_size"),
        ("mem-queue-size", True, "invalid value true for config key mem_queue_size"),
        ("deflate", "yes", 'invalid value "yes" for config key deflate: parse error'),
        ("lookupd-tcp-address", [1, 2], "for config key nsqlookupd_tcp_addresses"),
        ("pct", "x", 'invalid value "x" for config key pct: parse error'),
        ("tcp-address", [1], "for config key tcp_address"),
    ],
)
def test_config_coercion_errors(name: str, value: object, message: str) -> None:
    flag = _flagset().lookup(name)
    assert flag is not None
    with pytest.raises(FlagError) as info:
        coerce_config_value(flag, value)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_resolve_reports_bad_config_value() -> None:
    fs = _flagset()
    with pytest.raises(FlagError, match="config key id"):
        resolve(fs, fs.parse([]), {"id": "seven"})


def test_load_config_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(FlagError) as info:
        load_config(missing)
    assert str(info.value) == (
        f"failed to load config file {missing} - open {missing}: no such file or directory"
    )
    bad = _write(tmp_path, "this is = = not toml\n")
    with pytest.raises(FlagError, match=r"failed to load config file .* - toml: ") as info2:
        load_config(bad)
    assert "\n" not in str(info2.value)
    with pytest.raises(FlagError, match="is a directory"):
        load_config(str(tmp_path))


def test_load_config_reads_toml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, 'a = 1\nb = ["x", "y"]\nc = "60s"\n')
    assert load_config(path) == {"a": 1, "b": ["x", "y"], "c": "60s"}


def test_unknown_kind_rejected() -> None:
    with pytest.raises(ValueError, match="unknown flag kind"):
        Flag("x", "complex", 0)
