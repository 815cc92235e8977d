"""nsqlookupd's options (docs/protocol.md §6.4): the `NSQLookupdOptions` dataclass with NSQ's
defaults, its Go-compatible flag table and config keys, `parse_nsqlookupd_args` and validation."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from trionsq.logs import parse_log_level
from trionsq.options import (
    BOOL,
    DURATION,
    STRING,
    FlagSet,
    FlagSpec,
    ValidationError,
    flagset_from_specs,
    parse_options,
)

__all__ = ["NSQLookupdOptions", "nsqlookupd_flagset", "parse_nsqlookupd_args"]


@dataclass
class NSQLookupdOptions:
    """Every nsqlookupd option, NSQ's defaults; durations in float seconds. Field names are the
    flag names with ``-`` -> ``_``, which are also the config-file keys."""

    # command-line only
    version: bool = False
    config: str = ""
    verbose: bool = False  # deprecated, no effect

    log_level: str = "info"
    log_prefix: str = "[nsqlookupd] "
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    inactive_producer_timeout: float = 300.0
    tombstone_lifetime: float = 45.0

    #: fields given explicitly on the command line / taken from the config file
    explicit_fields: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    config_fields: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def validate(self) -> None:
        """Normalise ``log_level``; raises `ValidationError` with a one-line message. (Go's
        nsqlookupd checks nothing else before it listens.)"""
        try:
            self.log_level = parse_log_level(self.log_level)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None


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
    ("tcp-address", STRING, "<addr>:<port> to listen on for TCP clients", {}),
    ("http-address", STRING, "<addr>:<port> to listen on for HTTP clients", {}),
    (
        "broadcast-address",
        STRING,
        "address of this lookupd node, (default to the OS hostname)",
        {},
    ),
    (
        "inactive-producer-timeout",
        DURATION,
        "duration of time a producer will remain in the active list since its last ping",
        {},
    ),
    (
        "tombstone-lifetime",
        DURATION,
        "duration of time a producer will remain tombstoned if registration remains",
        {},
    ),
)


def nsqlookupd_flagset(defaults: NSQLookupdOptions | None = None) -> FlagSet:
    """nsqlookupd's flag table (defaults from ``defaults`` or a fresh `NSQLookupdOptions`)."""
    base = NSQLookupdOptions() if defaults is None else defaults
    return flagset_from_specs("nsqlookupd", _FLAG_SPECS, base)


def parse_nsqlookupd_args(argv: Sequence[str]) -> NSQLookupdOptions:
    """Parse nsqlookupd's command line (without the program name), then its ``--config`` TOML
    file (skipped when ``--version`` is given, as in Go). Raises `trionsq.options.FlagError`,
    `trionsq.options.HelpRequested`; does not call `NSQLookupdOptions.validate`."""
    return parse_options(nsqlookupd_flagset(), NSQLookupdOptions, argv)
