"""Go-compatible option handling shared by every trionsq daemon and app: `flag`-package command
lines, TOML config files and NSQ's flag > config > default resolution."""

from .config import Resolved, coerce_config_value, load_config, resolve
from .goflags import (
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
    HelpRequested,
    OptionsError,
    ParsedArgs,
    ValidationError,
)
from .goparse import (
    GoParseError,
    format_duration,
    go_quote,
    parse_bool,
    parse_duration,
    parse_duration_seconds,
    parse_float,
    parse_int,
)

__all__ = [
    "BOOL",
    "DURATION",
    "FLOAT",
    "FLOATS",
    "INT",
    "STRING",
    "STRINGS",
    "Flag",
    "FlagError",
    "FlagSet",
    "GoParseError",
    "HelpRequested",
    "OptionsError",
    "ParsedArgs",
    "Resolved",
    "ValidationError",
    "coerce_config_value",
    "format_duration",
    "go_quote",
    "load_config",
    "parse_bool",
    "parse_duration",
    "parse_duration_seconds",
    "parse_float",
    "parse_int",
    "resolve",
]
