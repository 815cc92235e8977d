"""NSQDOptions: NSQ's defaults (docs/protocol.md §3), flag/config resolution and startup
validation."""

from __future__ import annotations

import io
import re
import socket
from dataclasses import fields
from pathlib import Path

import pytest

from trionsq.logs import set_log_level, setup_logging
from trionsq.nsqd.options import (
    NSQDOptions,
    cfg_key_for_field,
    nsqd_flagset,
    parse_nsqd_args,
)
from trionsq.options import FlagError, HelpRequested, ValidationError
from trionsq.protocol import default_node_id

EXPECTED_DEFAULTS = {
    "version": False,
    "config": "",
    "verbose": False,
    "worker_id": False,
    "log_level": "info",
    "log_prefix": "[nsqd] ",
    "tcp_address": "0.0.0.0:4150",
    "http_address": "0.0.0.0:4151",
    "https_address": "0.0.0.0:4152",
    "broadcast_tcp_port": 0,
    "broadcast_http_port": 0,
    "nsqlookupd_tcp_addresses": [],
    "auth_http_addresses": [],
    "auth_http_request_method": "get",
    "http_client_connect_timeout": 2.0,
    "http_client_request_timeout": 5.0,
    "topology_region": "",
    "topology_zone": "",
    "data_path": "",
    "mem_queue_size": 10000,
    "max_bytes_per_file": 104857600,
    "sync_every": 2500,
    "sync_timeout": 2.0,
    "queue_scan_interval": 0.1,
    "queue_scan_refresh_interval": 5.0,
    "queue_scan_selection_count": 20,
    "queue_scan_worker_pool_max": 4,
    "queue_scan_dirty_percent": 0.25,
    "msg_timeout": 60.0,
    "max_msg_timeout": 900.0,
    "max_msg_size": 1048576,
    "max_body_size": 5242880,
    "max_req_timeout": 3600.0,
    "client_timeout": 60.0,
    "max_heartbeat_interval": 60.0,
    "max_rdy_count": 2500,
    "max_output_buffer_size": 65536,
    "max_output_buffer_timeout": 30.0,
    "min_output_buffer_timeout": 0.025,
    "output_buffer_timeout": 0.25,
    "max_channel_consumers": 0,
    "statsd_address": "",
    "statsd_prefix": "nsq.%s",
    "statsd_interval": 60.0,
    "statsd_mem_stats": True,
    "statsd_udp_packet_size": 508,
    "statsd_exclude_ephemeral": False,
    "e2e_processing_latency_window_time": 600.0,
    "e2e_processing_latency_percentiles": [],
    "tls_cert": "",
    "tls_key": "",
    "tls_client_auth_policy": "",
    "tls_root_ca_file": "",
    "tls_required": "false",
    "tls_min_version": "tls1.0",
    "deflate": True,
    "max_deflate_level": 6,
    "snappy": True,
    "enable_experiment": [],
}

NSQD_FLAGS = str.split(
    """
version config log-level log-prefix verbose node-id worker-id tcp-address http-address
https-address broadcast-address broadcast-tcp-port broadcast-http-port lookupd-tcp-address
auth-http-address auth-http-request-method http-client-connect-timeout
http-client-request-timeout topology-region topology-zone data-path mem-queue-size
max-bytes-per-file sync-every sync-timeout queue-scan-worker-pool-max queue-scan-selection-count
msg-timeout max-msg-timeout max-msg-size max-req-timeout max-body-size max-heartbeat-interval
max-rdy-count max-output-buffer-size max-output-buffer-timeout min-output-buffer-timeout
output-buffer-timeout max-channel-consumers statsd-address statsd-interval statsd-mem-stats
statsd-prefix statsd-udp-packet-size statsd-exclude-ephemeral e2e-processing-latency-percentile
e2e-processing-latency-window-time tls-cert tls-key tls-client-auth-policy tls-root-ca-file
tls-required tls-min-version deflate max-deflate-level snappy enable-experiment
"""
)

#: trionsq's own flags, beyond NSQ's: opt-in, their defaults leave nsqd NSQ's.
TRIONSQ_DEFAULTS: dict[str, object] = {
    "sync_ack": False,
    "busy_poll": 0.0001,
    "max_defer_timeout": 0.0,
    # bounded queues
    "max_queue_depth": 0,
    "max_queue_bytes": 0,
    "queue_full_policy": "reject",
    # dead letters and TTL
    "max_attempts": 0,
    "dead_letter_topic": "{topic}.dead",
    "message_ttl": 0.0,
    # replicated topics (docs/replication.md section 4): off without --replicate-to
    "replicate_to": [],
    "replicate_topic": [],
    "replication_secret": "",
    "replication_heartbeat_interval": 0.5,
    "replication_lease": 2.0,
    "replication_failover_timeout": 3.0,
    "replication_fin_interval": 0.1,
    "replication_ack_timeout": 5.0,
    "replication_window": 4 * 1024 * 1024,
    "replication_degraded": "refuse",
    "replication_trace_file": "",
}
TRIONSQ_FLAGS = [
    "sync-ack",
    "busy-poll",
    "max-defer-timeout",
    "max-queue-depth",
    "max-queue-bytes",
    "queue-full-policy",
    "max-attempts",
    "dead-letter-topic",
    "message-ttl",
    "replicate-to",
    "replicate-topic",
    "replication-secret",
    "replication-heartbeat-interval",
    "replication-lease",
    "replication-failover-timeout",
    "replication-fin-interval",
    "replication-ack-timeout",
    "replication-window",
    "replication-degraded",
    "replication-trace-file",
]


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nsqd.toml"
    path.write_text(text)
    return str(path)


def test_defaults_match_nsq() -> None:
    opts = NSQDOptions()
    for name, value in {**EXPECTED_DEFAULTS, **TRIONSQ_DEFAULTS}.items():
        assert getattr(opts, name) == value, name
    assert opts.node_id == default_node_id()
    assert 0 <= opts.node_id < 1024
    assert opts.broadcast_address == socket.gethostname()
    covered = set(EXPECTED_DEFAULTS) | set(TRIONSQ_DEFAULTS) | {"node_id", "broadcast_address"}
    covered |= {"explicit_fields", "config_fields"}
    assert {f.name for f in fields(NSQDOptions)} == covered


def test_parse_no_args_gives_defaults() -> None:
    opts = parse_nsqd_args([])
    assert opts == NSQDOptions()
    assert opts.explicit_fields == frozenset()
    assert opts.config_fields == frozenset()
    opts.validate()


def test_flag_table_is_nsqds() -> None:
    assert sorted(nsqd_flagset().flags) == sorted(NSQD_FLAGS + TRIONSQ_FLAGS)


def test_special_field_and_cfg_names() -> None:
    assert cfg_key_for_field("node_id") == "id"
    assert cfg_key_for_field("nsqlookupd_tcp_addresses") == "nsqlookupd_tcp_addresses"
    assert cfg_key_for_field("auth_http_addresses") == "auth_http_addresses"
    assert cfg_key_for_field("e2e_processing_latency_percentiles") == (
        "e2e_processing_latency_percentiles"
    )
    assert cfg_key_for_field("enable_experiment") == "enable_experiment"
    assert cfg_key_for_field("msg_timeout") == "msg_timeout"
    for cli_only in ("version", "config", "verbose", "worker_id", "client_timeout"):
        assert cfg_key_for_field(cli_only) is None


def test_command_line_values() -> None:
    opts = parse_nsqd_args(
        [
            "--node-id=12",
            "-lookupd-tcp-address",
            "127.0.0.1:4160",
            "--lookupd-tcp-address=127.0.0.2:4160",
            "--auth-http-address=http://a/auth",
            "--e2e-processing-latency-percentile=0.5,0.99",
            "--e2e-processing-latency-percentile",
            "1.0",
            "--enable-experiment=topology-aware-consumption",
            "--msg-timeout=1m30s",
            "--output-buffer-timeout=100ms",
            "--deflate=false",
            "--snappy=0",
            "--log-level=WARNING",
            "--data-path",
            "/tmp/x",
            "pos-arg-ignored",
            "--mem-queue-size=1",
        ]
    )
    assert opts.node_id == 12
    assert opts.nsqlookupd_tcp_addresses == ["127.0.0.1:4160", "127.0.0.2:4160"]
    assert opts.auth_http_addresses == ["http://a/auth"]
    assert opts.e2e_processing_latency_percentiles == [1.0, 0.99, 0.5]
    assert opts.has_experiment("topology-aware-consumption")
    assert opts.msg_timeout == 90.0
    assert opts.output_buffer_timeout == 0.1
    assert opts.deflate is False
    assert opts.snappy is False
    assert opts.log_level == "warn"
    assert opts.data_path == "/tmp/x"
    assert opts.mem_queue_size == 10000  # after the first positional argument: not parsed
    assert "node_id" in opts.explicit_fields
    assert "mem_queue_size" not in opts.explicit_fields


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--tls-required"], "true"),
        (["-tls-required=true"], "true"),
        (["--tls-required=false"], "false"),
        (["--tls-required=0"], "false"),
        (["--tls-required=tcp-https"], "tcp-https"),
        (["--tls-required=TCP-HTTPS"], "tcp-https"),
        (["--tls-required=TRUE"], "true"),
    ],
)
def test_tls_required_forms(argv: list[str], value: str) -> None:
    assert parse_nsqd_args(argv).tls_required == value


def test_tls_required_is_bool_like() -> None:
    opts = parse_nsqd_args(["--tls-required", "tcp-https", "--mem-queue-size=1"])
    assert opts.tls_required == "true"
    assert opts.mem_queue_size == 10000


def test_tls_min_version() -> None:
    assert parse_nsqd_args(["--tls-min-version=TLS1.2"]).tls_min_version == "tls1.2"
    assert parse_nsqd_args(["--tls-min-version=tls1.3"]).tls_min_version == "tls1.3"
    assert parse_nsqd_args(["--tls-min-version="]).tls_min_version == "tls1.0"
    with pytest.raises(FlagError) as info:
        parse_nsqd_args(["--tls-min-version=ssl3.0"])
    assert str(info.value) == (
        'invalid value "ssl3.0" for flag -tls-min-version: unknown tlsVersionOption "ssl3.0"'
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nope"], "flag provided but not defined: -nope"),
        (["--mem-queue-size=abc"], 'invalid value "abc" for flag -mem-queue-size: parse error'),
        (["--msg-timeout=60"], 'invalid value "60" for flag -msg-timeout: parse error'),
        (["--tcp-address"], "flag needs an argument: -tcp-address"),
        (["--deflate=yes"], 'invalid boolean value "yes" for -deflate: parse error'),
        (["--tls-required=maybe"], 'invalid boolean value "maybe" for -tls-required: parse error'),
        (
            ["--log-level=loud"],
            "invalid value \"loud\" for flag -log-level: invalid log level 'loud' "
            "(debug, info, warn, error, fatal)",
        ),
        (
            ["--e2e-processing-latency-percentile=x"],
            'invalid value "x" for flag -e2e-processing-latency-percentile: parse error',
        ),
    ],
)
def test_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_nsqd_args(argv)
    assert str(info.value) == message


def test_help() -> None:
    with pytest.raises(HelpRequested) as info:
        parse_nsqd_args(["--help"])
    assert info.value.usage.startswith("Usage of nsqd:\n  -auth-http-address value\n")
    assert "  -msg-timeout duration\n" in info.value.usage
    assert "(default 1m0s)" in info.value.usage


def test_config_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
id = 77
tcp_address = "127.0.0.1:5150"
mem_queue_size = 100
msg_timeout = "30s"
sync_timeout = 500
nsqlookupd_tcp_addresses = ["127.0.0.1:4160", "127.0.0.1:5160"]
auth_http_addresses = "a:1,b:2"
e2e_processing_latency_percentiles = [0.5, 1]
enable_experiment = ["topology-aware-consumption"]
deflate = "false"
snappy = false
tls_required = "tcp-https"
tls_min_version = "tls1.2"
log_level = "DEBUG"
some_unknown_key = "ignored"
version = true
""",
    )
    opts = parse_nsqd_args([f"--config={path}", "--mem-queue-size=5"])
    assert opts.config == path
    assert opts.node_id == 77
    assert opts.tcp_address == "127.0.0.1:5150"
    assert opts.mem_queue_size == 5  # command line beats config
    assert opts.msg_timeout == 30.0
    assert opts.sync_timeout == 0.5  # integers are milliseconds
    assert opts.nsqlookupd_tcp_addresses == ["127.0.0.1:4160", "127.0.0.1:5160"]
    assert opts.auth_http_addresses == ["a:1", "b:2"]
    assert opts.e2e_processing_latency_percentiles == [0.5, 1.0]
    assert opts.enable_experiment == ["topology-aware-consumption"]
    assert opts.deflate is False
    assert opts.snappy is False
    assert opts.tls_required == "tcp-https"
    assert opts.tls_min_version == "tls1.2"
    assert opts.log_level == "debug"
    assert opts.version is False  # command-line only
    assert opts.explicit_fields == {"config", "mem_queue_size"}
    assert "node_id" in opts.config_fields
    assert "mem_queue_size" not in opts.config_fields


def test_max_defer_timeout_falls_back_to_max_req_timeout(tmp_path: Path) -> None:
    # Unset (0), DPUB's limit is --max-req-timeout's, as in NSQ; set, it is its own.
    assert NSQDOptions().defer_limit == 3600.0
    assert parse_nsqd_args(["--max-req-timeout=2m"]).defer_limit == 120.0
    opts = parse_nsqd_args(["--max-req-timeout=2m", "--max-defer-timeout=24h"])
    assert (opts.max_defer_timeout, opts.defer_limit, opts.max_req_timeout) == (
        86400.0,
        86400.0,
        120.0,
    )
    path = _write(tmp_path, 'max_defer_timeout = "90m"\n')
    assert parse_nsqd_args(["--config", path]).defer_limit == 5400.0
    path = _write(tmp_path, "max_defer_timeout = 1500\n")  # integers are milliseconds
    assert parse_nsqd_args(["--config", path]).defer_limit == 1.5
    opts = parse_nsqd_args(["--max-defer-timeout=-1s"])
    with pytest.raises(ValidationError, match="--max-defer-timeout must be >= 0"):
        opts.validate()
    with pytest.raises(HelpRequested) as info:
        parse_nsqd_args(["--help"])
    assert "  -max-defer-timeout duration\n    \t[trionsq] maximum defer time" in (info.value.usage)


def test_config_tls_required_bool(tmp_path: Path) -> None:
    path = _write(tmp_path, "tls_required = true\n")
    assert parse_nsqd_args(["--config", path]).tls_required == "true"


def test_config_empty_tls_min_version_keeps_default(tmp_path: Path) -> None:
    path = _write(tmp_path, 'tls_min_version = ""\n')
    assert parse_nsqd_args(["--config", path]).tls_min_version == "tls1.0"


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ('msg_timeout = "sixty"\n', "config key msg_timeout"),
        ('mem_queue_size = "many"\n', "config key mem_queue_size"),
        ('tls_required = "maybe"\n', "config key tls_required"),
        ('tls_min_version = "ssl3.0"\n', "config key tls_min_version"),
        ('log_level = "loud"\n', "config key log_level"),
        ("id = 1.5\n", "config key id"),
        ('e2e_processing_latency_percentiles = ["x"]\n', "e2e_processing_latency_percentiles"),
    ],
)
def test_config_errors(tmp_path: Path, toml: str, fragment: str) -> None:
    path = _write(tmp_path, toml)
    with pytest.raises(FlagError) as info:
        parse_nsqd_args(["--config", path])
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.toml")
    with pytest.raises(FlagError, match="failed to load config file"):
        parse_nsqd_args(["--config", path])


def test_version_skips_config(tmp_path: Path) -> None:
    opts = parse_nsqd_args(["--version", "--config", str(tmp_path / "missing.toml")])
    assert opts.version is True


def test_get_option_by_cfg_key() -> None:
    opts = parse_nsqd_args(["--node-id=5", "--lookupd-tcp-address=h:1", "--msg-timeout=2s"])
    assert opts.get_option_by_cfg_key("id") == 5
    assert opts.get_option_by_cfg_key("nsqlookupd_tcp_addresses") == ["h:1"]
    assert opts.get_option_by_cfg_key("msg_timeout") == 2.0
    assert opts.get_option_by_cfg_key("log_level") == "info"
    for missing in ("node_id", "lookupd_tcp_address", "version", "config", "client_timeout"):
        with pytest.raises(KeyError):
            opts.get_option_by_cfg_key(missing)


def test_go_value_by_cfg_key() -> None:
    opts = NSQDOptions(tls_required="tcp-https")
    assert opts.go_value_by_cfg_key("msg_timeout") == 60_000_000_000
    assert opts.go_value_by_cfg_key("output_buffer_timeout") == 250_000_000
    assert opts.go_value_by_cfg_key("log_level") == 2
    assert opts.go_value_by_cfg_key("tls_required") == 1
    assert opts.go_value_by_cfg_key("tls_min_version") == 0x0301
    assert opts.go_value_by_cfg_key("mem_queue_size") == 10000


def test_set_option_by_cfg_key() -> None:
    opts = NSQDOptions()
    opts.set_option_by_cfg_key("nsqlookupd_tcp_addresses", ["a:1"])
    opts.set_option_by_cfg_key("log_level", "ERROR")
    assert opts.nsqlookupd_tcp_addresses == ["a:1"]
    assert opts.log_level == "error"
    with pytest.raises(FlagError):
        opts.set_option_by_cfg_key("log_level", "loud")
    with pytest.raises(KeyError):
        opts.set_option_by_cfg_key("nope", 1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"busy_poll": -0.001}, "--busy-poll must be between 0 and 10ms"),
        ({"busy_poll": 0.5}, "--busy-poll must be between 0 and 10ms"),
        ({"max_deflate_level": 0}, "--max-deflate-level must be [1,9]"),
        ({"max_deflate_level": 10}, "--max-deflate-level must be [1,9]"),
        ({"node_id": -1}, "--node-id must be [0,1024)"),
        ({"node_id": 1024}, "--node-id must be [0,1024)"),
        (
            {"tls_client_auth_policy": "whatever"},
            "--tls-client-auth-policy must be 'require' or 'require-verify'",
        ),
        (
            {"tls_required": "true"},
            "cannot require TLS client connections without TLS key and cert",
        ),
        (
            {"tls_required": "tcp-https", "tls_cert": "c.pem"},
            "cannot require TLS client connections without TLS key and cert",
        ),
        (
            {"tls_client_auth_policy": "require"},
            "cannot require TLS client connections without TLS key and cert",
        ),
        ({"tls_required": "sometimes"}, "--tls-required must be true, false or tcp-https"),
        ({"tls_min_version": "tls9"}, 'unknown tlsVersionOption "tls9"'),
        ({"auth_http_request_method": "put"}, "--auth-http-request-method must be post or get"),
        ({"auth_http_request_method": "GET"}, "--auth-http-request-method must be post or get"),
        (
            {"e2e_processing_latency_percentiles": [0.5, 0.0]},
            "invalid E2E processing latency percentile: 0",
        ),
        (
            {"e2e_processing_latency_percentiles": [1.5]},
            "invalid E2E processing latency percentile: 1.5",
        ),
        ({"log_level": "loud"}, "invalid log level 'loud' (debug, info, warn, error, fatal)"),
    ],
)
def test_validation_errors(changes: dict[str, object], message: str) -> None:
    opts = NSQDOptions(**changes)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as info:
        opts.validate()
    assert str(info.value) == message


def test_validation_accepts_edges_and_upgrades_tls_required() -> None:
    NSQDOptions(max_deflate_level=1, node_id=0).validate()
    NSQDOptions(max_deflate_level=9, node_id=1023).validate()
    NSQDOptions(e2e_processing_latency_percentiles=[1.0, 0.001]).validate()
    NSQDOptions(auth_http_request_method="post").validate()
    opts = NSQDOptions(tls_client_auth_policy="require-verify", tls_cert="c", tls_key="k")
    opts.validate()
    assert opts.tls_required == "true"
    opts = NSQDOptions(tls_client_auth_policy="require", tls_required="tcp-https")
    opts.tls_cert, opts.tls_key = "c", "k"
    opts.validate()
    assert opts.tls_required == "tcp-https"
    opts = NSQDOptions(log_level="WARNING")
    opts.validate()
    assert opts.log_level == "warn"


def test_log_format_and_levels() -> None:
    stream = io.StringIO()
    logger = setup_logging("trionsq.test-logs", "[nsqd] ", "warn", stream=stream)
    setup_logging("trionsq.test-logs", "[nsqd] ", "WARNING", stream=stream)  # idempotent
    logger.info("hidden")
    logger.warning("TCP: listening on %s", "127.0.0.1:4150")
    logger.critical("boom")
    lines = stream.getvalue().splitlines()
    stamp = r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} "
    assert len(lines) == 2
    assert re.fullmatch(stamp + "WARNING: TCP: listening on 127.0.0.1:4150", lines[0])
    assert re.fullmatch(stamp + "FATAL: boom", lines[1])
    set_log_level("trionsq.test-logs", "debug")
    logger.debug("now visible")
    assert stream.getvalue().splitlines()[-1].endswith(" DEBUG: now visible")
    with pytest.raises(ValueError, match="invalid log level"):
        set_log_level("trionsq.test-logs", "loud")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicate-topic=x"], "--replicate-topic needs --replicate-to"),
        (["--replicate-to=127.0.0.1:1"], "--replicate-to needs --replication-secret"),
        (
            ["--replicate-to=127.0.0.1:1", "--replication-secret=s", "--replicate-topic=("],
            "--replicate-topic '('",
        ),
        (
            ["--replicate-to=127.0.0.1:1", "--replication-secret=s", "--replication-degraded=x"],
            "--replication-degraded must be refuse or accept",
        ),
        (
            [
                "--replicate-to=127.0.0.1:1",
                "--replication-secret=s",
                "--replication-failover-timeout=2s",
            ],
            "--replication-failover-timeout must exceed",
        ),
    ],
)
def test_replication_flags_are_checked(argv: list[str], message: str) -> None:
    options = parse_nsqd_args(argv)
    with pytest.raises(ValidationError, match=re.escape(message)):
        options.validate()


def test_replication_flags_off_by_default_validate() -> None:
    parse_nsqd_args([]).validate()
    options = parse_nsqd_args(
        ["--replicate-to=127.0.0.1:1", "--replication-secret=s", "--replicate-topic=orders.*"]
    )
    options.validate()
    assert options.replicate_topic == ["orders.*"]
