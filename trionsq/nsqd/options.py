"""nsqd's options: the `NSQDOptions` dataclass with NSQ's defaults, its Go-compatible flag table
and config keys, `parse_nsqd_args` and the startup validation of Go's `nsqd.New`."""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trionsq.logs import parse_log_level
from trionsq.options import (
    BOOL,
    DURATION,
    FLOATS,
    INT,
    STRING,
    STRINGS,
    Flag,
    FlagSet,
    ValidationError,
    coerce_config_value,
    parse_bool,
    parse_options,
)
from trionsq.protocol import default_node_id

from .dead_letter_names import DEFAULT_DEAD_LETTER_TOPIC, MAX_ATTEMPTS_LIMIT, pattern_problem

__all__ = [
    "EXPERIMENTS",
    "NSQDOptions",
    "cfg_key_for_field",
    "nsqd_flagset",
    "parse_nsqd_args",
]

#: --queue-full-policy's values (trionsq.nsqd.bounds).
QUEUE_FULL_POLICIES = ("reject", "drop-oldest")

#: --replication-degraded's values (trionsq.nsqd.replication.node).
REPLICATION_DEGRADED = ("refuse", "accept")

#: Experiments `--enable-experiment` knows about (post-1.3.0).
EXPERIMENTS = ("topology-aware-consumption",)

_TLS_VERSIONS = ("tls1.0", "tls1.1", "tls1.2", "tls1.3")
_TLS_POLICIES = ("", "require", "require-verify")
# Go's integer encodings, for /config/:opt answers
_GO_LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
_GO_TLS_REQUIRED = {"false": 0, "tcp-https": 1, "true": 2}
_GO_TLS_VERSIONS = {"tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303, "tls1.3": 0x0304}


def _parse_tls_required(text: str) -> str:
    """Go's tlsRequiredOption.Set: ``tcp-https`` or a ParseBool value (case-insensitive)."""
    low = text.lower()
    if low == "tcp-https":
        return "tcp-https"
    return "true" if parse_bool(low) else "false"


def _parse_tls_min_version(text: str) -> str:
    """Go's tlsMinVersionOption.Set: tls1.0..tls1.3 (any case); empty keeps the default."""
    low = text.lower()
    if low == "":
        return "tls1.0"
    if low not in _TLS_VERSIONS:
        raise ValueError(f'unknown tlsVersionOption "{low}"')
    return low


def _parse_queue_full_policy(text: str) -> str:
    if text not in QUEUE_FULL_POLICIES:
        raise ValueError(f'unknown queue full policy "{text}" (reject or drop-oldest)')
    return text


@dataclass
class NSQDOptions:
    """Every nsqd option, NSQ's defaults; durations in float seconds. Field names are the flag
    names with ``-`` -> ``_`` except ``node_id`` (cfg ``id``), ``nsqlookupd_tcp_addresses``,
    ``auth_http_addresses``, ``e2e_processing_latency_percentiles`` and ``enable_experiment``."""

    # command-line only
    version: bool = False
    config: str = ""
    verbose: bool = False  # deprecated, no effect
    worker_id: bool = False  # deprecated, ignored

    # basic options
    node_id: int = field(default_factory=default_node_id)
    log_level: str = "info"
    log_prefix: str = "[nsqd] "
    tcp_address: str = "0.0.0.0:4150"
    http_address: str = "0.0.0.0:4151"
    https_address: str = "0.0.0.0:4152"
    # beyond NSQ: keep the event loop polling this long after a read finds nothing (busy_poll.py)
    busy_poll: float = 0.0001
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    nsqlookupd_tcp_addresses: list[str] = field(default_factory=list)
    auth_http_addresses: list[str] = field(default_factory=list)
    auth_http_request_method: str = "get"
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    topology_region: str = ""
    topology_zone: str = ""

    # diskqueue options
    data_path: str = ""
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 100 * 1024 * 1024
    sync_every: int = 2500
    sync_timeout: float = 2.0
    # beyond NSQ: acknowledge publishes once fsynced (every message goes through the disk)
    sync_ack: bool = False
    # beyond NSQ: bounded queues (nsqd/bounds.py), per topic and channel; 0 is no limit
    max_queue_depth: int = 0
    max_queue_bytes: int = 0
    queue_full_policy: str = "reject"

    # beyond NSQ: dead-lettering and message TTL (dead_letter.py); 0 / the default: off
    max_attempts: int = 0
    dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC
    message_ttl: float = 0.0

    # beyond NSQ: replicated topics (replication.py, docs/replication.md); empty: off
    replicate_to: list[str] = field(default_factory=list)
    replicate_topic: list[str] = field(default_factory=list)
    replication_secret: str = ""
    replication_heartbeat_interval: float = 0.5
    replication_lease: float = 2.0
    replication_failover_timeout: float = 3.0
    replication_fin_interval: float = 0.1
    replication_ack_timeout: float = 5.0
    replication_window: int = 4 * 1024 * 1024
    replication_degraded: str = "refuse"
    # beyond NSQ: this member's replication steps, one JSON line each (replication/trace.py,
    # checked by `python -m spec trace`); empty: off
    replication_trace_file: str = ""

    queue_scan_interval: float = 0.1  # no flag
    queue_scan_refresh_interval: float = 5.0  # no flag
    queue_scan_selection_count: int = 20
    queue_scan_worker_pool_max: int = 4
    queue_scan_dirty_percent: float = 0.25  # no flag

    # msg and command options
    msg_timeout: float = 60.0
    max_msg_timeout: float = 15 * 60.0
    max_msg_size: int = 1024 * 1024
    max_body_size: int = 5 * 1024 * 1024
    max_req_timeout: float = 3600.0
    # beyond NSQ (NSQ #1499): DPUB's and /pub?defer's limit; 0 (unset): --max-req-timeout's
    max_defer_timeout: float = 0.0
    client_timeout: float = 60.0  # no flag

    # client overridable configuration options
    max_heartbeat_interval: float = 60.0
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 64 * 1024
    max_output_buffer_timeout: float = 30.0
    min_output_buffer_timeout: float = 0.025
    output_buffer_timeout: float = 0.25
    max_channel_consumers: int = 0

    # statsd integration
    statsd_address: str = ""
    statsd_prefix: str = "nsq.%s"
    statsd_interval: float = 60.0
    statsd_mem_stats: bool = True
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False

    # e2e message latency
    e2e_processing_latency_window_time: float = 600.0
    e2e_processing_latency_percentiles: list[float] = field(default_factory=list)

    # TLS config
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: str = "false"  # "false" | "true" | "tcp-https"
    tls_min_version: str = "tls1.0"

    # compression
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True

    # experimental features
    enable_experiment: list[str] = field(default_factory=list)

    #: fields given explicitly on the command line / taken from the config file
    explicit_fields: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    config_fields: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @property
    def defer_limit(self) -> float:
        """The longest deferral DPUB and ``/pub?defer=`` accept, in seconds:
        --max-defer-timeout when set, else --max-req-timeout (Go nsqd's only limit)."""
        return self.max_defer_timeout or self.max_req_timeout

    def has_experiment(self, name: str) -> bool:
        """True when ``--enable-experiment=name`` was given."""
        return name in self.enable_experiment

    def get_option_by_cfg_key(self, key: str) -> Any:
        """The value of the option whose config key is ``key`` (``/config/:opt``); `KeyError` for
        keys Go's getOptByCfgName would not find (unknown or command-line-only flags)."""
        return getattr(self, _CFG_TO_FIELD[key])

    def go_value_by_cfg_key(self, key: str) -> Any:
        """Like `get_option_by_cfg_key`, but as Go nsqd JSON-encodes it: durations in integer
        nanoseconds, log level / tls_required / tls_min_version as Go's integers."""
        value = self.get_option_by_cfg_key(key)
        name = _CFG_TO_FIELD[key]
        if _FIELD_KINDS[name] == DURATION:
            return round(value * 1_000_000_000)
        if name == "log_level":
            return _GO_LOG_LEVELS[value]
        if name == "tls_required":
            return _GO_TLS_REQUIRED[value]
        if name == "tls_min_version":
            return _GO_TLS_VERSIONS[value]
        return value

    def set_option_by_cfg_key(self, key: str, value: Any) -> None:
        """Set an option from a config-file style value (coerced like the TOML file);
        `KeyError` for unknown keys, `trionsq.options.FlagError` for bad values."""
        flag = nsqd_flagset().by_cfg[key]
        setattr(self, flag.attr, coerce_config_value(flag, value))

    def validate(self) -> None:
        """Go's nsqd.New checks; raises `ValidationError` with a one-line message. Normalises
        ``log_level`` and upgrades ``tls_required`` when a client auth policy is set."""
        try:
            self.log_level = parse_log_level(self.log_level)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        if not 0 <= self.busy_poll <= 0.01:
            raise ValidationError("--busy-poll must be between 0 and 10ms")
        if not 1 <= self.max_deflate_level <= 9:
            raise ValidationError("--max-deflate-level must be [1,9]")
        if not 0 <= self.node_id < 1024:
            raise ValidationError("--node-id must be [0,1024)")
        if self.tls_client_auth_policy not in _TLS_POLICIES:
            raise ValidationError("--tls-client-auth-policy must be 'require' or 'require-verify'")
        if self.tls_required not in _GO_TLS_REQUIRED:
            raise ValidationError("--tls-required must be true, false or tcp-https")
        if self.tls_client_auth_policy and self.tls_required == "false":
            self.tls_required = "true"
        if self.tls_required != "false" and not (self.tls_cert and self.tls_key):
            raise ValidationError("cannot require TLS client connections without TLS key and cert")
        if self.tls_min_version not in _TLS_VERSIONS:
            raise ValidationError(f'unknown tlsVersionOption "{self.tls_min_version}"')
        if self.auth_http_request_method not in ("post", "get"):
            raise ValidationError("--auth-http-request-method must be post or get")
        if self.max_defer_timeout < 0:
            raise ValidationError("--max-defer-timeout must be >= 0")
        if self.max_queue_depth < 0:
            raise ValidationError("--max-queue-depth must be >= 0")
        if self.max_queue_bytes < 0:
            raise ValidationError("--max-queue-bytes must be >= 0")
        if self.queue_full_policy not in QUEUE_FULL_POLICIES:
            raise ValidationError("--queue-full-policy must be reject or drop-oldest")
        for p in self.e2e_processing_latency_percentiles:
            if not 0 < p <= 1:
                raise ValidationError(f"invalid E2E processing latency percentile: {p:g}")
        if not 0 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise ValidationError(f"--max-attempts must be [0,{MAX_ATTEMPTS_LIMIT}]")
        if self.message_ttl < 0:
            raise ValidationError("--message-ttl must be >= 0")
        problem = pattern_problem(self.dead_letter_topic)
        if problem:
            raise ValidationError(f"--dead-letter-topic {problem}")
        self._validate_replication()

    def _validate_replication(self) -> None:
        """The replication flags (docs/replication.md section 4): checked only when set."""
        if not (self.replicate_to or self.replicate_topic):
            return
        if not self.replicate_to:
            raise ValidationError("--replicate-topic needs --replicate-to")
        if not self.replication_secret:
            raise ValidationError("--replicate-to needs --replication-secret")
        for pattern in self.replicate_topic:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValidationError(f"--replicate-topic {pattern!r}: {err}") from None
        if self.replication_degraded not in REPLICATION_DEGRADED:
            raise ValidationError("--replication-degraded must be refuse or accept")
        for name in (
            "replication_heartbeat_interval",
            "replication_lease",
            "replication_fin_interval",
            "replication_ack_timeout",
        ):
            if getattr(self, name) <= 0:
                raise ValidationError(f"--{name.replace('_', '-')} must be > 0")
        if self.replication_window <= 0:
            raise ValidationError("--replication-window must be > 0")
        margin = self.replication_lease * 1.1 + self.replication_heartbeat_interval
        if self.replication_failover_timeout <= margin:
            raise ValidationError(
                "--replication-failover-timeout must exceed --replication-lease x 1.1 + "
                f"--replication-heartbeat-interval ({margin:g}s)"
            )


# (flag name, kind, field or None, help, extra Flag keyword arguments)
_FLAG_SPECS: tuple[tuple[str, str, str | None, str, dict[str, Any]], ...] = (
    ("version", BOOL, None, "print version string", {"cfg": None}),
    ("config", STRING, None, "path to config file", {"cfg": None}),
    (
        "log-level",
        STRING,
        None,
        "set log verbosity: debug, info, warn, error, or fatal",
        {"parse": parse_log_level, "type_name": "value"},
    ),
    ("log-prefix", STRING, None, "log message prefix", {}),
    ("verbose", BOOL, None, "[deprecated] has no effect, use --log-level", {"cfg": None}),
    (
        "node-id",
        INT,
        "node_id",
        "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)",
        {"cfg": "id"},
    ),
    ("worker-id", BOOL, None, "[deprecated] use --node-id", {"cfg": None}),
    ("https-address", STRING, None, "<addr>:<port> to listen on for HTTPS clients", {}),
    (
        "http-address",
        STRING,
        None,
        "address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix "
        "socket)",
        {},
    ),
    (
        "tcp-address",
        STRING,
        None,
        "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)",
        {},
    ),
    (
        "busy-poll",
        DURATION,
        None,
        "[trionsq] keep polling for this long after a connection finds nothing to read, "
        "rather than sleep at once: lower latency for request-reply traffic at the cost of "
        "CPU time while traffic flows (0 to disable)",
        {},
    ),
    (
        "auth-http-address",
        STRINGS,
        "auth_http_addresses",
        "<addr>:<port> or a full url to query auth server (may be given multiple times)",
        {"cfg": "auth_http_addresses"},
    ),
    (
        "auth-http-request-method",
        STRING,
        None,
        "HTTP method to use for auth server requests",
        {},
    ),
    (
        "broadcast-address",
        STRING,
        None,
        "address that will be registered with lookupd (defaults to the OS hostname)",
        {},
    ),
    (
        "broadcast-tcp-port",
        INT,
        None,
        "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd "
        "is listening on)",
        {},
    ),
    (
        "broadcast-http-port",
        INT,
        None,
        "HTTP port that will be registered with lookupd (defaults to the HTTP port that this "
        "nsqd is listening on)",
        {},
    ),
    (
        "lookupd-tcp-address",
        STRINGS,
        "nsqlookupd_tcp_addresses",
        "lookupd TCP address (may be given multiple times)",
        {"cfg": "nsqlookupd_tcp_addresses"},
    ),
    ("http-client-connect-timeout", DURATION, None, "timeout for HTTP connect", {}),
    ("http-client-request-timeout", DURATION, None, "timeout for HTTP request", {}),
    (
        "topology-region",
        STRING,
        None,
        "A region represents a larger domain, made up of one or more zones for preferring "
        "closer consumer",
        {},
    ),
    (
        "topology-zone",
        STRING,
        None,
        "A zone represents a logical failure domain for preferring closer consumer",
        {},
    ),
    ("data-path", STRING, None, "path to store disk-backed messages", {}),
    (
        "mem-queue-size",
        INT,
        None,
        "number of messages to keep in memory (per topic/channel)",
        {},
    ),
    (
        "max-bytes-per-file",
        INT,
        None,
        "number of bytes per diskqueue file before rolling",
        {},
    ),
    ("sync-every", INT, None, "number of messages per diskqueue fsync", {}),
    ("sync-timeout", DURATION, None, "duration of time per diskqueue fsync", {}),
    (
        "sync-ack",
        BOOL,
        None,
        "[trionsq] answer PUB/MPUB/DPUB (TCP and HTTP) only once their messages are fsynced, "
        "so that a power loss loses no acknowledged message; every message goes through the "
        "disk, as with --mem-queue-size=0 (one fsync covers every publisher waiting)",
        {},
    ),
    (
        "max-queue-depth",
        INT,
        None,
        "[trionsq] most messages queued (memory and disk) per topic/channel, 0 for no limit "
        "(default for each; HTTP /topic/config and /channel/config override it)",
        {},
    ),
    (
        "max-queue-bytes",
        INT,
        None,
        "[trionsq] most bytes in the disk queue per topic/channel, 0 for no limit (default "
        "for each; HTTP /topic/config and /channel/config override it)",
        {},
    ),
    (
        "queue-full-policy",
        STRING,
        None,
        "[trionsq] when a topic/channel is at its limit: 'reject' (PUB fails) or "
        "'drop-oldest' (its oldest queued messages are dropped)",
        {"parse": _parse_queue_full_policy, "type_name": "value"},
    ),
    (
        "max-attempts",
        INT,
        None,
        "[trionsq] deliver a message at most this many times: one that would be delivered "
        "again is moved (same ID, body, timestamp and attempts) to its dead-letter topic "
        "(0: no limit, as NSQ)",
        {},
    ),
    (
        "dead-letter-topic",
        STRING,
        None,
        "[trionsq] name of the topic a channel's dead letters go to; {topic} and {channel} "
        "stand for the channel's topic and name",
        {},
    ),
    (
        "message-ttl",
        DURATION,
        None,
        "[trionsq] drop (or, with --max-attempts, dead-letter) a message older than this "
        "(since it was published) when it would be delivered (0: no limit, as NSQ)",
        {},
    ),
    (
        "replicate-to",
        STRINGS,
        None,
        "[trionsq] <addr>:<port> (TCP) of another member of this nsqd's replica set (may be "
        "given multiple times; every member lists the others): replicated topics are written "
        "on a quorum before PUB is answered (docs/replication.md); none: replication off",
        {},
    ),
    (
        "replicate-topic",
        STRINGS,
        None,
        "[trionsq] regular expression: topics whose whole name matches are replicated (may be "
        "given multiple times)",
        {},
    ),
    (
        "replication-secret",
        STRING,
        None,
        "[trionsq] shared secret the members prove with an HMAC when they connect (required "
        "with --replicate-to)",
        {},
    ),
    (
        "replication-heartbeat-interval",
        DURATION,
        None,
        "[trionsq] how often a topic's primary heartbeats its replicas",
        {},
    ),
    (
        "replication-lease",
        DURATION,
        None,
        "[trionsq] a primary without a quorum's acknowledgement of a heartbeat sent within "
        "this long stops serving the topic (steps down)",
        {},
    ),
    (
        "replication-failover-timeout",
        DURATION,
        None,
        "[trionsq] a replica that has heard nothing from the primary for this long stands for "
        "election (must exceed the lease x 1.1 + the heartbeat interval)",
        {},
    ),
    (
        "replication-fin-interval",
        DURATION,
        None,
        "[trionsq] FINs are sent to the replicas in batches at this interval",
        {},
    ),
    (
        "replication-ack-timeout",
        DURATION,
        None,
        "[trionsq] a PUB to a replicated topic not written by a quorum within this long is "
        "answered E_PUB_FAILED (HTTP 503); a replica waits this long for a primary to "
        "forward a PUB to",
        {},
    ),
    (
        "replication-window",
        INT,
        None,
        "[trionsq] bytes sent to a replica and not yet acknowledged, per replica; a replica "
        "further behind leaves the stream and is caught up from disk when it rejoins",
        {},
    ),
    (
        "replication-degraded",
        STRING,
        None,
        "[trionsq] what a primary does without a quorum: 'refuse' (PUB fails after "
        "--replication-ack-timeout, delivery stops with the lease) or 'accept' (acknowledge "
        "after its own write, unreplicated)",
        {"type_name": "value"},
    ),
    (
        "replication-trace-file",
        STRING,
        None,
        "[trionsq] append this member's replication steps (roles, epochs, stream writes and "
        "acknowledgements, FIN batches) to this file, one JSON object per line, for "
        "'python -m spec trace' to check against the spec (docs/replication.md); empty: off",
        {},
    ),
    (
        "queue-scan-worker-pool-max",
        INT,
        None,
        "max concurrency for checking in-flight and deferred message timeouts",
        {},
    ),
    (
        "queue-scan-selection-count",
        INT,
        None,
        "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts",
        {},
    ),
    (
        "msg-timeout",
        DURATION,
        None,
        "default duration to wait before auto-requeing a message",
        {},
    ),
    (
        "max-msg-timeout",
        DURATION,
        None,
        "maximum duration before a message will timeout",
        {},
    ),
    ("max-msg-size", INT, None, "maximum size of a single message in bytes", {}),
    ("max-req-timeout", DURATION, None, "maximum requeuing timeout for a message", {}),
    (
        "max-defer-timeout",
        DURATION,
        None,
        "[trionsq] maximum defer time for DPUB and /pub?defer= (default: --max-req-timeout, "
        "the only limit in NSQ)",
        {},
    ),
    ("max-body-size", INT, None, "maximum size of a single command body", {}),
    (
        "max-heartbeat-interval",
        DURATION,
        None,
        "maximum client configurable duration of time between client heartbeats",
        {},
    ),
    ("max-rdy-count", INT, None, "maximum RDY count for a client", {}),
    (
        "max-output-buffer-size",
        INT,
        None,
        "maximum client configurable size (in bytes) for a client output buffer",
        {},
    ),
    (
        "max-output-buffer-timeout",
        DURATION,
        None,
        "maximum client configurable duration of time between flushing to a client",
        {},
    ),
    (
        "min-output-buffer-timeout",
        DURATION,
        None,
        "minimum client configurable duration of time between flushing to a client",
        {},
    ),
    (
        "output-buffer-timeout",
        DURATION,
        None,
        "default duration of time between flushing data to clients",
        {},
    ),
    (
        "max-channel-consumers",
        INT,
        None,
        "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)",
        {},
    ),
    (
        "statsd-address",
        STRING,
        None,
        "UDP <addr>:<port> of a statsd daemon for pushing stats",
        {},
    ),
    ("statsd-interval", DURATION, None, "duration between pushing to statsd", {}),
    (
        "statsd-mem-stats",
        BOOL,
        None,
        "toggle sending memory and GC stats to statsd",
        {},
    ),
    (
        "statsd-prefix",
        STRING,
        None,
        "prefix used for keys sent to statsd (%s for host replacement)",
        {},
    ),
    ("statsd-udp-packet-size", INT, None, "the size in bytes of statsd UDP packets", {}),
    (
        "statsd-exclude-ephemeral",
        BOOL,
        None,
        "Skip ephemeral topics and channels when sending stats to statsd",
        {},
    ),
    (
        "e2e-processing-latency-percentile",
        FLOATS,
        "e2e_processing_latency_percentiles",
        "message processing time percentiles (as float (0, 1.0]) to track (can be specified "
        "multiple times or comma separated '1.0,0.99,0.95', default none)",
        {"cfg": "e2e_processing_latency_percentiles", "sort_desc": True},
    ),
    (
        "e2e-processing-latency-window-time",
        DURATION,
        None,
        "calculate end to end latency quantiles for this duration of time (ie: 60s would only "
        "show quantile calculations from the past 60 seconds)",
        {},
    ),
    ("tls-cert", STRING, None, "path to certificate file", {}),
    ("tls-key", STRING, None, "path to key file", {}),
    (
        "tls-client-auth-policy",
        STRING,
        None,
        "client certificate auth policy ('require' or 'require-verify')",
        {},
    ),
    ("tls-root-ca-file", STRING, None, "path to certificate authority file", {}),
    (
        "tls-required",
        STRING,
        None,
        "require TLS for client connections (true, false, tcp-https)",
        {"parse": _parse_tls_required, "bool_flag": True},
    ),
    (
        "tls-min-version",
        STRING,
        None,
        "minimum SSL/TLS version acceptable ('tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
        {"parse": _parse_tls_min_version, "type_name": "value"},
    ),
    (
        "deflate",
        BOOL,
        None,
        "enable deflate feature negotiation (client compression)",
        {},
    ),
    (
        "max-deflate-level",
        INT,
        None,
        "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)",
        {},
    ),
    (
        "snappy",
        BOOL,
        None,
        "enable snappy feature negotiation (client compression)",
        {},
    ),
    (
        "enable-experiment",
        STRINGS,
        "enable_experiment",
        "enable experimental feature (may be given multiple times) (valid options: "
        + ", ".join(f'"{e}"' for e in EXPERIMENTS)
        + ")",
        {"cfg": "enable_experiment"},
    ),
)

_FIELD_KINDS = {(spec[2] or spec[0].replace("-", "_")): spec[1] for spec in _FLAG_SPECS}
_FIELD_TO_CFG: dict[str, str] = {
    (spec[2] or spec[0].replace("-", "_")): spec[4].get("cfg", spec[0].replace("-", "_"))
    for spec in _FLAG_SPECS
    if spec[4].get("cfg", "") is not None
}
_CFG_TO_FIELD = {cfg: name for name, cfg in _FIELD_TO_CFG.items()}


def cfg_key_for_field(name: str) -> str | None:
    """The TOML / ``/config`` key for field ``name``; ``None`` for fields without one."""
    return _FIELD_TO_CFG.get(name)


def nsqd_flagset(defaults: NSQDOptions | None = None) -> FlagSet:
    """nsqd's flag table (defaults from ``defaults`` or a fresh `NSQDOptions`)."""
    base = NSQDOptions() if defaults is None else defaults
    flags = []
    for name, kind, attr, help_text, extra in _FLAG_SPECS:
        attr = attr or name.replace("-", "_")
        flags.append(Flag(name, kind, getattr(base, attr), help_text, field=attr, **extra))
    return FlagSet("nsqd", flags)


def parse_nsqd_args(argv: Sequence[str]) -> NSQDOptions:
    """Parse nsqd's command line (without the program name), then its ``--config`` TOML file
    (skipped when ``--version`` is given, as in Go). Raises `trionsq.options.FlagError`,
    `trionsq.options.HelpRequested`; does not call `NSQDOptions.validate`."""
    return parse_options(nsqd_flagset(), NSQDOptions, argv)
