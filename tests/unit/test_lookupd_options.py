"""NSQLookupdOptions: NSQ's defaults (docs/protocol.md §6.4), Go flag syntax, TOML config keys and
validation."""

from __future__ import annotations

import socket
from dataclasses import fields
from pathlib import Path

import pytest

from trionsq.nsqlookupd.options import (
    NSQLookupdOptions,
    nsqlookupd_flagset,
    parse_nsqlookupd_args,
)
from trionsq.options import FlagError, HelpRequested, ValidationError

EXPECTED_DEFAULTS = {
    "version": False,
    "config": "",
    "verbose": False,
    "log_level": "info",
    "log_prefix": "[nsqlookupd] ",
    "tcp_address": "0.0.0.0:4160",
    "http_address": "0.0.0.0:4161",
    "broadcast_address": socket.gethostname(),
    "inactive_producer_timeout": 300.0,
    "tombstone_lifetime": 45.0,
}


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nsqlookupd.toml"
    path.write_text(text)
    return str(path)


def test_defaults_match_nsq() -> None:
    opts = NSQLookupdOptions()
    values = {f.name: getattr(opts, f.name) for f in fields(opts)}
    values.pop("explicit_fields")
    values.pop("config_fields")
    assert values == EXPECTED_DEFAULTS


def test_parse_no_args_gives_defaults() -> None:
    opts = parse_nsqlookupd_args([])
    assert opts == NSQLookupdOptions()
    assert opts.explicit_fields == frozenset()
    assert opts.config_fields == frozenset()


def test_flag_table_is_go_nsqlookupds() -> None:
    flagset = nsqlookupd_flagset()
    assert sorted(flagset.flags) == [
        "broadcast-address",
        "config",
        "http-address",
        "inactive-producer-timeout",
        "log-level",
        "log-prefix",
        "tcp-address",
        "tombstone-lifetime",
        "verbose",
        "version",
    ]
    assert sorted(flagset.by_cfg) == [
        "broadcast_address",
        "http_address",
        "inactive_producer_timeout",
        "log_level",
        "log_prefix",
        "tcp_address",
        "tombstone_lifetime",
    ]


def test_command_line_values() -> None:
    opts = parse_nsqlookupd_args(
        [
            "-tcp-address=127.0.0.1:5160",
            "--http-address",
            "127.0.0.1:5161",
            "--broadcast-address=lookupd.example",
            "--inactive-producer-timeout=1m30s",
            "--tombstone-lifetime",
            "250ms",
            "--log-level=WARN",
            "--log-prefix=[x] ",
            "--verbose",
        ]
    )
    assert opts.tcp_address == "127.0.0.1:5160"
    assert opts.http_address == "127.0.0.1:5161"
    assert opts.broadcast_address == "lookupd.example"
    assert opts.inactive_producer_timeout == 90.0
    assert opts.tombstone_lifetime == 0.25
    assert opts.log_level == "warn"
    assert opts.log_prefix == "[x] "
    assert opts.verbose is True
    assert opts.explicit_fields == {
        "tcp_address",
        "http_address",
        "broadcast_address",
        "inactive_producer_timeout",
        "tombstone_lifetime",
        "log_level",
        "log_prefix",
        "verbose",
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-such-flag"], "flag provided but not defined: -no-such-flag"),
        (["--tcp-address"], "flag needs an argument: -tcp-address"),
        (
            ["--tombstone-lifetime=45"],
            'invalid value "45" for flag -tombstone-lifetime: parse error',
        ),
        (
            ["--inactive-producer-timeout=soon"],
            'invalid value "soon" for flag -inactive-producer-timeout: parse error',
        ),
        (
            ["--log-level=loud"],
            "invalid value \"loud\" for flag -log-level: invalid log level 'loud' "
            "(debug, info, warn, error, fatal)",
        ),
        (["--version=maybe"], 'invalid boolean value "maybe" for -version: parse error'),
        (["-=x"], "bad flag syntax: -=x"),
    ],
)
def test_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_nsqlookupd_args(argv)
    assert str(info.value) == message


def test_help() -> None:
    with pytest.raises(HelpRequested) as info:
        parse_nsqlookupd_args(["-h"])
    usage = info.value.usage
    assert usage.startswith("Usage of nsqlookupd:\n  -broadcast-address string\n")
    assert "  -inactive-producer-timeout duration\n" in usage
    assert "(default 5m0s)" in usage
    assert "(default 45s)" in usage
    assert '(default "0.0.0.0:4160")' in usage
    assert '(default "[nsqlookupd] ")' in usage


def test_config_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
tcp_address = "127.0.0.1:5160"
http_address = "127.0.0.1:5161"
broadcast_address = "from-config"
inactive_producer_timeout = "10m"
tombstone_lifetime = 1500
log_level = "ERROR"
log_prefix = "[cfg] "
verbose = true
version = true
unknown_key = 1
""",
    )
    opts = parse_nsqlookupd_args([f"--config={path}", "--http-address=127.0.0.1:6161"])
    assert opts.config == path
    assert opts.tcp_address == "127.0.0.1:5160"
    assert opts.http_address == "127.0.0.1:6161"  # the command line beats the file
    assert opts.broadcast_address == "from-config"
    assert opts.inactive_producer_timeout == 600.0
    assert opts.tombstone_lifetime == 1.5  # integers are milliseconds (go-options)
    assert opts.log_level == "error"
    assert opts.log_prefix == "[cfg] "
    assert opts.verbose is False  # command-line only
    assert opts.version is False  # command-line only
    assert opts.explicit_fields == {"config", "http_address"}
    assert opts.config_fields == {
        "tcp_address",
        "broadcast_address",
        "inactive_producer_timeout",
        "tombstone_lifetime",
        "log_level",
        "log_prefix",
    }


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            'tombstone_lifetime = "forever"\n',
            'invalid value "forever" for config key tombstone_lifetime: '
            'time: invalid duration "forever"',
        ),
        (
            'log_level = "loud"\n',
            "invalid value \"loud\" for config key log_level: invalid log level 'loud' "
            "(debug, info, warn, error, fatal)",
        ),
        (
            "tcp_address = [1]\n",
            "invalid value [1] for config key tcp_address: invalid value type",
        ),
    ],
)
def test_config_errors(tmp_path: Path, toml: str, message: str) -> None:
    path = _write(tmp_path, toml)
    with pytest.raises(FlagError) as info:
        parse_nsqlookupd_args(["--config", path])
    assert str(info.value) == message


def test_missing_config_file(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.toml")
    with pytest.raises(FlagError) as info:
        parse_nsqlookupd_args(["--config", path])
    assert str(info.value) == (
        f"failed to load config file {path} - open {path}: no such file or directory"
    )


def test_version_skips_config(tmp_path: Path) -> None:
    opts = parse_nsqlookupd_args(["--version", "--config", str(tmp_path / "missing.toml")])
    assert opts.version is True


def test_flags_stop_at_the_first_argument() -> None:
    opts = parse_nsqlookupd_args(["--tcp-address=:1", "extra", "--http-address=:2"])
    assert opts.tcp_address == ":1"
    assert opts.http_address == "0.0.0.0:4161"


def test_validate_normalises_the_log_level() -> None:
    opts = NSQLookupdOptions(log_level="Warning")
    opts.validate()
    assert opts.log_level == "warn"


def test_validate_rejects_an_unknown_log_level() -> None:
    opts = NSQLookupdOptions(log_level="chatty")
    with pytest.raises(ValidationError) as info:
        opts.validate()
    assert str(info.value) == "invalid log level 'chatty' (debug, info, warn, error, fatal)"
