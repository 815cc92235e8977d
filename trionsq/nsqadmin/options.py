"""nsqadmin's options (docs/protocol.md §8): the `NSQAdminOptions` dataclass with Go nsqadmin's
defaults, its flag table and config keys, `parse_nsqadmin_args`, Go's startup checks (`validate`)
and the ``/config/:opt`` view of the options."""

from __future__ import annotations

import ipaddress
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trionsq.logs import LEVELS, parse_log_level
from trionsq.net.addresses import split_host_port
from trionsq.options import (
    BOOL,
    DURATION,
    STRING,
    STRINGS,
    FlagSet,
    FlagSpec,
    ValidationError,
    flagset_from_specs,
    parse_options,
)

__all__ = [
    "NSQAdminOptions",
    "normalize_base_path",
    "nsqadmin_flagset",
    "parse_cidr",
    "parse_nsqadmin_args",
]

#: Go's lg.LogLevel integers (what ``GET /config/log_level`` answers).
_GO_LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
assert set(_GO_LOG_LEVELS) <= set(LEVELS)


@dataclass
class NSQAdminOptions:
    """Every nsqadmin option with Go's defaults; durations in float seconds. Field names are
    the flag names with ``-`` -> ``_`` except the three lists, named by their config keys."""

    # command-line only
    version: bool = False
    config: str = ""
    verbose: bool = False  # deprecated, no effect

    log_level: str = "info"
    log_prefix: str = "[nsqadmin] "
    http_address: str = "0.0.0.0:4171"
    base_path: str = "/"
    dev_static_dir: str = ""
    graphite_url: str = ""
    proxy_graphite: bool = False
    statsd_counter_format: str = "stats.counters.%s.count"
    statsd_gauge_format: str = "stats.gauges.%s"
    statsd_prefix: str = "nsq.%s"
    statsd_interval: float = 60.0
    notification_http_endpoint: str = ""
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    http_client_tls_insecure_skip_verify: bool = False
    http_client_tls_root_ca_file: str = ""
    http_client_tls_cert: str = ""
    http_client_tls_key: str = ""
    allow_config_from_cidr: str = "127.0.0.1/8"
    acl_http_header: str = "X-Forwarded-User"
    nsqlookupd_http_addresses: list[str] = field(default_factory=list)
    nsqd_http_addresses: list[str] = field(default_factory=list)
    admin_users: list[str] = field(default_factory=list)
    # beyond NSQ: how often the charts' history samples the cluster (history.py); 0: never
    history_interval: float = 10.0

    #: fields given explicitly on the command line / taken from the config file
    explicit_fields: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    config_fields: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @property
    def lookupd_mode(self) -> bool:
        """True when the cluster is read through nsqlookupd (Go: any lookupd address set)."""
        return bool(self.nsqlookupd_http_addresses)

    def validate(self) -> None:
        """Go's nsqadmin.New checks, in its order; raises `ValidationError` with Go's text.
        Normalises ``log_level`` and ``base_path``."""
        try:
            self.log_level = parse_log_level(self.log_level)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        if not self.nsqd_http_addresses and not self.nsqlookupd_http_addresses:
            raise ValidationError("--nsqd-http-address or --lookupd-http-address required")
        if self.nsqd_http_addresses and self.nsqlookupd_http_addresses:
            raise ValidationError("use --nsqd-http-address or --lookupd-http-address not both")
        if self.http_client_tls_cert and not self.http_client_tls_key:
            raise ValidationError(
                "--http-client-tls-key must be specified with --http-client-tls-cert"
            )
        if self.http_client_tls_key and not self.http_client_tls_cert:
            raise ValidationError(
                "--http-client-tls-cert must be specified with --http-client-tls-key"
            )
        for flag, addresses in (
            ("--lookupd-http-address", self.nsqlookupd_http_addresses),
            ("--nsqd-http-address", self.nsqd_http_addresses),
        ):
            for address in addresses:
                try:
                    split_host_port(address)
                except ValueError as exc:
                    raise ValidationError(f"failed to resolve {flag} ({address}) - {exc}") from None
        if self.allow_config_from_cidr:
            try:
                parse_cidr(self.allow_config_from_cidr)
            except ValueError:
                raise ValidationError(
                    f"failed to parse --allow-config-from-cidr ({self.allow_config_from_cidr})"
                    f" - invalid CIDR address: {self.allow_config_from_cidr}"
                ) from None
        self.base_path = normalize_base_path(self.base_path)

    def go_value_by_cfg_key(self, key: str) -> Any:
        """The option whose config key is `key` as Go JSON-encodes it (``GET /config/:opt``):
        durations in integer nanoseconds, the log level as Go's integer. `KeyError` for keys
        Go's getOptByCfgName does not know (unknown, or command-line only)."""
        flag = nsqadmin_flagset().by_cfg[key]
        value = getattr(self, flag.attr)
        if flag.kind == DURATION:
            return round(value * 1_000_000_000)
        if flag.attr == "log_level":
            return _GO_LOG_LEVELS[value]
        if isinstance(value, list):
            return list(value)
        return value


def parse_cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """Go's net.ParseCIDR (host bits may be set: ``127.0.0.1/8``); `ValueError` otherwise."""
    if "/" not in text:
        raise ValueError(text)
    return ipaddress.ip_network(text, strict=False)


def normalize_base_path(path: str) -> str:
    """Go's normalizeBasePath: ``/`` when empty, a leading ``/`` added, then path.Clean."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    cleaned = posixpath.normpath(path)
    # posixpath keeps a leading "//" (POSIX); Go's path.Clean does not
    return "/" + cleaned.lstrip("/")


_STATSD_FORMAT_HELP = (
    "The {} stats key formatting applied by the implementation of statsd. If no formatting "
    "is desired, set this to an empty string."
)

# (flag name, kind, help, extra Flag keyword arguments), in Go's order
_FLAG_SPECS: tuple[FlagSpec, ...] = (
    ("config", STRING, "path to config file", {"cfg": None}),
    ("version", BOOL, "print version string", {"cfg": None}),
    (
        "log-level",
        STRING,
        "set log verbosity: debug, info, warn, error, or fatal",
        {"parse": parse_log_level, "type_name": "value"},
    ),
    ("log-prefix", STRING, "log message prefix", {}),
    ("verbose", BOOL, "[deprecated] has no effect, use --log-level", {"cfg": None}),
    ("http-address", STRING, "<addr>:<port> to listen on for HTTP clients", {}),
    ("base-path", STRING, "URL base path", {}),
    ("dev-static-dir", STRING, "(development use only)", {}),
    ("graphite-url", STRING, "graphite HTTP address", {}),
    ("proxy-graphite", BOOL, "proxy HTTP requests to graphite", {}),
    ("statsd-counter-format", STRING, _STATSD_FORMAT_HELP.format("counter"), {}),
    ("statsd-gauge-format", STRING, _STATSD_FORMAT_HELP.format("gauge"), {}),
    (
        "statsd-prefix",
        STRING,
        "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)",
        {},
    ),
    (
        "statsd-interval",
        DURATION,
        "time interval nsqd is configured to push to statsd (must match nsqd)",
        {},
    ),
    (
        "notification-http-endpoint",
        STRING,
        "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent",
        {},
    ),
    ("http-client-connect-timeout", DURATION, "timeout for HTTP connect", {}),
    ("http-client-request-timeout", DURATION, "timeout for HTTP request", {}),
    (
        "http-client-tls-insecure-skip-verify",
        BOOL,
        "configure the HTTP client to skip verification of TLS certificates",
        {},
    ),
    ("http-client-tls-root-ca-file", STRING, "path to CA file for the HTTP client", {}),
    ("http-client-tls-cert", STRING, "path to certificate file for the HTTP client", {}),
    ("http-client-tls-key", STRING, "path to key file for the HTTP client", {}),
    (
        "allow-config-from-cidr",
        STRING,
        "A CIDR from which to allow HTTP requests to the /config endpoint",
        {},
    ),
    ("acl-http-header", STRING, "HTTP header to check for authenticated admin users", {}),
    (
        "lookupd-http-address",
        STRINGS,
        "lookupd HTTP address (may be given multiple times)",
        {"field": "nsqlookupd_http_addresses", "cfg": "nsqlookupd_http_addresses"},
    ),
    (
        "nsqd-http-address",
        STRINGS,
        "nsqd HTTP address (may be given multiple times)",
        {"field": "nsqd_http_addresses", "cfg": "nsqd_http_addresses"},
    ),
    (
        "admin-user",
        STRINGS,
        "admin user (may be given multiple times; if specified, only these users will be able "
        "to perform privileged actions; acl-http-header is used to determine the authenticated "
        "user)",
        {"field": "admin_users", "cfg": "admin_users"},
    ),
    (
        "history-interval",
        DURATION,
        "(beyond NSQ) how often to sample each topic's and channel's rate and depth, so that "
        "charts open on the last hour (0 to not sample; with --graphite-url the charts read "
        "graphite)",
        {},
    ),
)


def nsqadmin_flagset(defaults: NSQAdminOptions | None = None) -> FlagSet:
    """nsqadmin's flag table (defaults from ``defaults`` or a fresh `NSQAdminOptions`)."""
    base = NSQAdminOptions() if defaults is None else defaults
    return flagset_from_specs("nsqadmin", _FLAG_SPECS, base)


def parse_nsqadmin_args(argv: Sequence[str]) -> NSQAdminOptions:
    """Parse nsqadmin's command line (without the program name), then its ``--config`` TOML
    file (skipped with ``--version``). Raises `trionsq.options.FlagError`,
    `trionsq.options.HelpRequested`; does not call `NSQAdminOptions.validate`."""
    return parse_options(nsqadmin_flagset(), NSQAdminOptions, argv)
