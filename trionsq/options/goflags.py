"""Command-line parsing with the syntax and error messages of Go's `flag` package, driven by a
table of `Flag`s shared by every trionsq daemon and app."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .goparse import (
    GoParseError,
    format_duration,
    go_quote,
    parse_bool,
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
    "KINDS",
    "STRING",
    "STRINGS",
    "Flag",
    "FlagError",
    "FlagSet",
    "HelpRequested",
    "OptionsError",
    "ParsedArgs",
    "ValidationError",
]

STRING = "string"
INT = "int"
BOOL = "bool"
FLOAT = "float"
DURATION = "duration"  # stored as float seconds
STRINGS = "strings"  # repeatable; Go nsq's StringArray
FLOATS = "floats"  # repeatable, comma lists allowed; Go nsq's FloatArray
KINDS = frozenset({STRING, INT, BOOL, FLOAT, DURATION, STRINGS, FLOATS})


class OptionsError(ValueError):
    """Base of every options error; ``str()`` is a single line."""


class FlagError(OptionsError):
    """A bad command line or config file (Go exits 2 for flag errors)."""


class ValidationError(OptionsError):
    """Options that parse but cannot start a daemon (Go nsqd's fatal startup errors, exit 1)."""


class HelpRequested(Exception):
    """``-h``/``-help``/``--help`` was given; ``usage`` is the text Go prints to stderr."""

    def __init__(self, usage: str) -> None:
        super().__init__("flag: help requested")
        self.usage = usage


def _split_strings(value: str) -> list[str]:
    # Go nsq resolves StringArray flags through their comma-joined String(), then splits on ","
    return [part for part in value.split(",") if part]


def _flag_duration(value: str) -> float:
    # Go's durationValue.Set reports every ParseDuration failure as a plain "parse error"
    try:
        return parse_duration_seconds(value)
    except GoParseError:
        raise GoParseError("parse error") from None


def _split_floats(value: str) -> list[float]:
    return [parse_float(part) for part in value.split(",")]


_KIND_PARSERS: dict[str, Callable[[str], Any]] = {
    STRING: str,
    INT: parse_int,
    BOOL: parse_bool,
    FLOAT: parse_float,
    DURATION: _flag_duration,
    STRINGS: _split_strings,
    FLOATS: _split_floats,
}


@dataclass(frozen=True)
class Flag:
    """One flag: ``name`` without dashes, its ``kind``, default, help text.

    ``field`` is the attribute it fills (default: name with ``-`` -> ``_``); ``cfg`` is the TOML
    key (default: name with ``-`` -> ``_``; ``None`` = not settable from the config file).
    ``parse`` overrides the kind's string parser (raise ``ValueError`` with Go's reason);
    ``bool_flag`` makes a non-bool flag take no separate argument (Go's ``IsBoolFlag``).
    ``sort_desc`` sorts a float list descending after each occurrence (Go nsq's FloatArray).
    """

    name: str
    kind: str
    default: Any
    help: str = ""
    field: str | None = None
    cfg: str | None = ""
    parse: Callable[[str], Any] | None = None
    bool_flag: bool = False
    sort_desc: bool = False
    type_name: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown flag kind {self.kind!r} for -{self.name}")

    @property
    def attr(self) -> str:
        """The attribute name this flag fills."""
        return self.field or self.name.replace("-", "_")

    @property
    def cfg_key(self) -> str | None:
        """The config-file key, or ``None`` when the flag is command-line only."""
        if self.cfg is None:
            return None
        return self.cfg or self.name.replace("-", "_")

    @property
    def is_bool(self) -> bool:
        """True when a bare ``-flag`` is complete and never consumes the next argument."""
        return self.kind == BOOL or self.bool_flag

    @property
    def repeatable(self) -> bool:
        """True for list flags, where each occurrence adds values."""
        return self.kind in (STRINGS, FLOATS)

    def parse_value(self, text: str) -> Any:
        """Parse one command-line value; raises ``ValueError`` with Go's reason."""
        return (self.parse or _KIND_PARSERS[self.kind])(text)


@dataclass
class ParsedArgs:
    """The result of `FlagSet.parse`: values by attribute, the attributes given explicitly (in
    first-seen order) and the positional arguments left after the flags."""

    values: dict[str, Any] = field(default_factory=dict)
    explicit: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)


class FlagSet:
    """A Go-style flag set: ``-flag``, ``--flag``, ``-flag=value``, ``-flag value``; ``--``
    ends the flags and parsing stops at the first non-flag argument."""

    def __init__(self, name: str, flags: Iterable[Flag]) -> None:
        self.name = name
        self.flags: dict[str, Flag] = {}
        for f in flags:
            if f.name in self.flags:
                raise ValueError(f"flag redefined: {f.name}")
            self.flags[f.name] = f
        self.by_attr = {f.attr: f for f in self.flags.values()}
        self.by_cfg = {f.cfg_key: f for f in self.flags.values() if f.cfg_key is not None}

    def lookup(self, name: str) -> Flag | None:
        """The flag called ``name`` (no dashes), if defined."""
        return self.flags.get(name)

    def defaults(self) -> dict[str, Any]:
        """Every flag's default, by attribute (lists copied)."""
        return {
            f.attr: list(f.default) if isinstance(f.default, list) else f.default
            for f in self.flags.values()
        }

    def parse(self, argv: Sequence[str]) -> ParsedArgs:
        """Parse ``argv`` (without the program name); raises `FlagError` or `HelpRequested`."""
        result = ParsedArgs()
        args = list(argv)
        while args:
            s = args[0]
            if len(s) < 2 or s[0] != "-":
                break
            minuses = 2 if s[1] == "-" else 1
            if s == "--":
                args.pop(0)
                break
            name = s[minuses:]
            if not name or name[0] in "-=":
                raise FlagError(f"bad flag syntax: {s}")
            args.pop(0)
            has_value = False
            value = ""
            eq = name.find("=", 1)
            if eq > 0:
                name, value, has_value = name[:eq], name[eq + 1 :], True
            flag = self.flags.get(name)
            if flag is None:
                if name in ("help", "h"):
                    raise HelpRequested(self.usage())
                raise FlagError(f"flag provided but not defined: -{name}")
            if flag.is_bool:
                text = value if has_value else "true"
                try:
                    parsed = flag.parse_value(text)
                except ValueError as exc:
                    raise FlagError(
                        f"invalid boolean value {go_quote(text)} for -{name}: {exc}"
                    ) from None
            else:
                if not has_value:
                    if not args:
                        raise FlagError(f"flag needs an argument: -{name}")
                    value = args.pop(0)
                try:
                    parsed = flag.parse_value(value)
                except ValueError as exc:
                    raise FlagError(
                        f"invalid value {go_quote(value)} for flag -{name}: {exc}"
                    ) from None
            self._store(result, flag, parsed)
        result.args = args
        return result

    @staticmethod
    def _store(result: ParsedArgs, flag: Flag, parsed: Any) -> None:
        attr = flag.attr
        if flag.repeatable:
            items = result.values.get(attr, []) + list(parsed)
            if flag.sort_desc:
                items.sort(reverse=True)
            result.values[attr] = items
        else:
            result.values[attr] = parsed
        if attr not in result.explicit:
            result.explicit.append(attr)

    def usage(self) -> str:
        """Go's ``Usage of <name>:`` text with ``PrintDefaults`` layout, sorted by name."""
        lines = [f"Usage of {self.name}:"]
        for name in sorted(self.flags):
            f = self.flags[name]
            head = f"  -{name}"
            type_name = _type_name(f)
            if type_name:
                head += f" {type_name}"
            text = head + ("\t" if len(head) <= 4 else "\n    \t") + f.help
            default = _default_text(f)
            if default is not None:
                text += f" (default {default})"
            lines.append(text)
        return "\n".join(lines) + "\n"


#: (flag name, kind, help, extra `Flag` keyword arguments): a daemon's flag table row
FlagSpec = tuple[str, str, str, dict[str, Any]]


def flagset_from_specs(name: str, specs: Iterable[FlagSpec], defaults: object) -> FlagSet:
    """The FlagSet ``name`` of `specs`; each flag's default is the attribute of `defaults` it
    fills (the ``field`` given in its extra arguments, else its name with ``-`` -> ``_``)."""
    flags = [
        Flag(
            flag,
            kind,
            getattr(defaults, extra.get("field") or flag.replace("-", "_")),
            help_text,
            **extra,
        )
        for flag, kind, help_text, extra in specs
    ]
    return FlagSet(name, flags)


def _type_name(f: Flag) -> str:
    if f.type_name is not None:
        return f.type_name
    if f.is_bool:
        return ""
    if f.parse is not None or f.repeatable:
        return "value"
    return {STRING: "string", INT: "int", FLOAT: "float", DURATION: "duration"}[f.kind]


def _default_text(f: Flag) -> str | None:
    d = f.default
    if d in (None, "", False, 0, []) and f.kind != DURATION:
        return None
    if f.kind == DURATION:
        return None if not d else format_duration(round(d * 1_000_000_000))
    if f.kind == STRING and f.parse is None:
        return go_quote(d)
    if isinstance(d, bool):
        return "true" if d else "false"
    if isinstance(d, list):
        return ",".join(str(x) for x in d)
    return str(d)
