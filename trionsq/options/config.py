"""TOML config files and option resolution (flag on the command line > config file > default),
with go-options' type coercion for config values."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

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
    ParsedArgs,
)
from .goparse import GoParseError, go_quote, parse_bool, parse_duration, parse_float

__all__ = ["Resolved", "coerce_config_value", "load_config", "parse_options", "resolve"]

T = TypeVar("T")

_INT64_MAX = (1 << 63) - 1
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+")


def load_config(path: str) -> dict[str, Any]:
    """Read a TOML config file; a missing, unreadable or malformed file is a `FlagError`."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        reason = f"open {path}: no such file or directory"
    except IsADirectoryError:
        reason = f"read {path}: is a directory"
    except PermissionError:
        reason = f"open {path}: permission denied"
    except OSError as exc:
        reason = f"open {path}: {exc.strerror or exc}"
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        reason = f"toml: {exc}"
    raise FlagError(f"failed to load config file {path} - {reason}")


def _go_text(value: Any) -> str:
    """Go's %v for a TOML scalar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _describe(value: Any) -> str:
    return go_quote(value) if isinstance(value, str) else _go_text(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _coerce_int(value: Any) -> int:
    if _is_int(value):
        return int(value)
    if isinstance(value, str):
        if not _DECIMAL_RE.fullmatch(value):
            raise GoParseError("parse error")
        number = int(value)
        if not -_INT64_MAX - 1 <= number <= _INT64_MAX:
            raise GoParseError("value out of range")
        return number
    raise GoParseError("invalid value type")


def _coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_bool(value)
    if _is_int(value):
        return bool(value != 0)
    raise GoParseError("invalid value type")


def _coerce_float(value: Any) -> float:
    if isinstance(value, bool):
        raise GoParseError("invalid value type")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return parse_float(value.strip())
    raise GoParseError("invalid value type")


def _coerce_duration(value: Any) -> float:
    if isinstance(value, str):
        return parse_duration(value) / 1_000_000_000
    if _is_int(value):
        return float(value) / 1000  # go-options: integers are milliseconds
    raise GoParseError("invalid value type")


def _coerce_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [part for part in value.split(",") if part]
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return list(value)
    raise GoParseError("invalid value type")


def _coerce_floats(value: Any) -> list[float]:
    if isinstance(value, str):
        return [parse_float(part.strip()) for part in value.split(",")]
    if isinstance(value, list):
        return [_coerce_float(x) for x in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [float(value)]
    raise GoParseError("invalid value type")


def _coerce_string(value: Any) -> str:
    if isinstance(value, str | int | float | bool):
        return _go_text(value)
    raise GoParseError("invalid value type")


_COERCERS = {
    STRING: _coerce_string,
    INT: _coerce_int,
    BOOL: _coerce_bool,
    FLOAT: _coerce_float,
    DURATION: _coerce_duration,
    STRINGS: _coerce_strings,
    FLOATS: _coerce_floats,
}


def coerce_config_value(flag: Flag, value: Any) -> Any:
    """Coerce one config-file (or `/config` PUT) value for ``flag``; `FlagError` names the key."""
    try:
        if flag.parse is not None and not isinstance(value, list | dict):
            coerced = flag.parse(_go_text(value))
        else:
            coerced = _COERCERS[flag.kind](value)
    except ValueError as exc:
        raise FlagError(
            f"invalid value {_describe(value)} for config key {flag.cfg_key}: {exc}"
        ) from None
    return coerced


class Resolved:
    """Resolved option values by attribute, plus where the non-default ones came from."""

    def __init__(
        self, values: dict[str, Any], from_flags: frozenset[str], from_config: frozenset[str]
    ) -> None:
        self.values = values
        self.from_flags = from_flags
        self.from_config = from_config


def resolve(flagset: FlagSet, parsed: ParsedArgs, config: Mapping[str, Any]) -> Resolved:
    """Merge with NSQ's precedence: explicit command-line flag > config file key > default.

    Unknown config keys are ignored; command-line-only flags (``cfg=None``) never read the file.
    """
    values = flagset.defaults()
    from_config: set[str] = set()
    for flag in flagset.flags.values():
        attr = flag.attr
        if attr in parsed.explicit:
            values[attr] = parsed.values[attr]
            continue
        key = flag.cfg_key
        if key is not None and key in config:
            values[attr] = coerce_config_value(flag, config[key])
            from_config.add(attr)
    return Resolved(values, frozenset(parsed.explicit), frozenset(from_config))


def parse_options(flagset: FlagSet, options_class: type[T], argv: Sequence[str]) -> T:
    """A daemon's command line (without the program name), then its ``--config`` TOML file
    (skipped when ``--version`` is given, as in Go), into `options_class` (a dataclass whose
    fields are the flags' attributes plus ``explicit_fields`` and ``config_fields``). Raises
    `FlagError`, `HelpRequested`; validation is the caller's."""
    parsed = flagset.parse(argv)
    config: dict[str, Any] = {}
    path = parsed.values.get("config", "")
    if path and not parsed.values.get("version"):
        config = load_config(path)
    resolved = resolve(flagset, parsed, config)
    known = {f.name for f in dataclasses.fields(options_class)}  # type: ignore[arg-type]
    values = {k: v for k, v in resolved.values.items() if k in known}
    values["explicit_fields"] = resolved.from_flags
    values["config_fields"] = resolved.from_config
    return options_class(**values)
