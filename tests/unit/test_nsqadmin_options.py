"""nsqadmin's flags, config file, Go's startup checks and the /config view of the options."""

from __future__ import annotations

from pathlib import Path

import pytest

from trionsq.nsqadmin.options import (
    NSQAdminOptions,
    normalize_base_path,
    nsqadmin_flagset,
    parse_nsqadmin_args,
)
from trionsq.options import FlagError, ValidationError


def test_defaults_are_go_nsqadmins() -> None:
    o = parse_nsqadmin_args([])
    assert o.http_address == "0.0.0.0:4171"
    assert o.base_path == "/"
    assert o.log_prefix == "[nsqadmin] "
    assert o.log_level == "info"
    assert o.statsd_prefix == "nsq.%s"
    assert o.statsd_counter_format == "stats.counters.%s.count"
    assert o.statsd_gauge_format == "stats.gauges.%s"
    assert o.statsd_interval == 60.0
    assert o.http_client_connect_timeout == 2.0
    assert o.http_client_request_timeout == 5.0
    assert o.allow_config_from_cidr == "127.0.0.1/8"
    assert o.acl_http_header == "X-Forwarded-User"
    assert o.nsqlookupd_http_addresses == [] and o.nsqd_http_addresses == []
    assert o.admin_users == []


def test_repeatable_flags_and_durations() -> None:
    o = parse_nsqadmin_args(
        [
            "--lookupd-http-address=a:4161",
            "-lookupd-http-address",
            "b:4161",
            "--admin-user=alice",
            "--admin-user=bob",
            "--http-client-request-timeout=250ms",
            "--statsd-interval=10s",
            "--base-path=admin",
        ]
    )
    assert o.nsqlookupd_http_addresses == ["a:4161", "b:4161"]
    assert o.admin_users == ["alice", "bob"]
    assert o.http_client_request_timeout == 0.25
    assert o.statsd_interval == 10.0
    o.validate()
    assert o.base_path == "/admin"
    assert o.lookupd_mode


def test_config_file_keys(tmp_path: Path) -> None:
    config = tmp_path / "nsqadmin.cfg"
    config.write_text(
        'nsqd_http_addresses = ["n1:4151", "n2:4151"]\n'
        'admin_users = ["root"]\n'
        'http_client_connect_timeout = "3s"\n'
        'log_level = "debug"\n'
        'base_path = "/x/"\n'
    )
    o = parse_nsqadmin_args([f"--config={config}", "--admin-user=cli"])
    assert o.nsqd_http_addresses == ["n1:4151", "n2:4151"]
    assert o.admin_users == ["cli"]  # the command line wins
    assert o.http_client_connect_timeout == 3.0
    assert o.log_level == "debug"
    o.validate()
    assert o.base_path == "/x"
    assert not o.lookupd_mode


def test_bad_flag_is_flag_error() -> None:
    with pytest.raises(FlagError, match="flag provided but not defined: -nope"):
        parse_nsqadmin_args(["--nope"])
    with pytest.raises(FlagError, match="invalid value"):
        parse_nsqadmin_args(["--statsd-interval=forever"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--nsqd-http-address or --lookupd-http-address required"),
        (
            ["--nsqd-http-address=a:1", "--lookupd-http-address=b:2"],
            "use --nsqd-http-address or --lookupd-http-address not both",
        ),
        (
            ["--nsqd-http-address=a:1", "--http-client-tls-cert=c.pem"],
            "--http-client-tls-key must be specified with --http-client-tls-cert",
        ),
        (
            ["--nsqd-http-address=a:1", "--http-client-tls-key=k.pem"],
            "--http-client-tls-cert must be specified with --http-client-tls-key",
        ),
        (
            ["--nsqd-http-address=nohost"],
            "failed to resolve --nsqd-http-address (nohost) - address nohost: missing port",
        ),
        (
            ["--lookupd-http-address=h:99999"],
            "failed to resolve --lookupd-http-address (h:99999)",
        ),
        (
            ["--nsqd-http-address=a:1", "--allow-config-from-cidr=10.0.0.1"],
            "failed to parse --allow-config-from-cidr (10.0.0.1)",
        ),
        (["--nsqd-http-address=a:1", "--log-level=loud"], "invalid log level 'loud'"),
    ],
)
def test_validate_go_errors(args: list[str], message: str) -> None:
    try:
        o = parse_nsqadmin_args(args)
    except FlagError as exc:  # --log-level is checked while parsing
        assert message in str(exc)
        return
    with pytest.raises(ValidationError) as info:
        o.validate()
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("given", "expected"),
    [("", "/"), ("/", "/"), ("admin", "/admin"), ("/admin/", "/admin"), ("//a//b/../c", "/a/c")],
)
def test_normalize_base_path(given: str, expected: str) -> None:
    assert normalize_base_path(given) == expected


def test_go_value_by_cfg_key() -> None:
    o = NSQAdminOptions(nsqd_http_addresses=["a:1"], log_level="warn")
    assert o.go_value_by_cfg_key("http_client_request_timeout") == 5_000_000_000
    assert o.go_value_by_cfg_key("statsd_interval") == 60_000_000_000
    assert o.go_value_by_cfg_key("log_level") == 3
    assert o.go_value_by_cfg_key("nsqd_http_addresses") == ["a:1"]
    assert o.go_value_by_cfg_key("nsqlookupd_http_addresses") == []
    assert o.go_value_by_cfg_key("acl_http_header") == "X-Forwarded-User"
    for missing in ("config", "version", "lookupd_http_addresses", "nope"):
        with pytest.raises(KeyError):
            o.go_value_by_cfg_key(missing)


def test_flag_table_has_every_go_flag() -> None:
    names = set(nsqadmin_flagset().flags)
    assert names == {
        "config", "version", "log-level", "log-prefix", "verbose", "http-address", "base-path",
        "dev-static-dir", "graphite-url", "proxy-graphite", "statsd-counter-format",
        "statsd-gauge-format", "statsd-prefix", "statsd-interval", "notification-http-endpoint",
        "http-client-connect-timeout", "http-client-request-timeout",
        "http-client-tls-insecure-skip-verify", "http-client-tls-root-ca-file",
        "http-client-tls-cert", "http-client-tls-key", "allow-config-from-cidr",
        "acl-http-header", "lookupd-http-address", "nsqd-http-address", "admin-user",
        "history-interval",  # beyond NSQ
    }  # fmt: skip
