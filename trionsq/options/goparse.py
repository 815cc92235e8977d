"""Go's value syntaxes: strconv.ParseBool/ParseInt(base 0)/ParseFloat, time.ParseDuration and
time.Duration.String, with Go's error wording."""

from __future__ import annotations

import math
import re

__all__ = [
    "GoParseError",
    "format_duration",
    "go_quote",
    "parse_bool",
    "parse_duration",
    "parse_duration_seconds",
    "parse_float",
    "parse_int",
]

_INT64_MAX = (1 << 63) - 1
_NS_PER_S = 1_000_000_000


class GoParseError(ValueError):
    """A value that Go's parsers reject; ``str()`` is Go's short reason (``parse error``,
    ``value out of range``, or a ``time: ...`` message for durations)."""


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(s: str) -> bool:
    """strconv.ParseBool: 1 t T TRUE true True / 0 f F FALSE false False."""
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise GoParseError("parse error")


def _underscore_ok(s: str) -> bool:
    """Go's rule: underscores only between digits (or right after a base prefix)."""
    saw = "^"
    i = 0
    if s[:1] in ("+", "-"):
        s = s[1:]
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i = 2
        saw = "0"
        hexa = s[1].lower() == "x"
    while i < len(s):
        c = s[i]
        if c.isascii() and (c.isdigit() or (hexa and c.lower() in "abcdef")):
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
        i += 1
    return saw != "_"


def parse_int(s: str) -> int:
    """strconv.ParseInt(s, 0, 64): decimal, 0x/0o/0b prefixes, leading-0 octal, underscores."""
    if not s:
        raise GoParseError("parse error")
    body = s
    neg = False
    if body[0] in "+-":
        neg = body[0] == "-"
        body = body[1:]
    if not body:
        raise GoParseError("parse error")
    base = 10
    if body[0] == "0":
        if len(body) >= 3 and body[1].lower() in "box":
            base = {"b": 2, "o": 8, "x": 16}[body[1].lower()]
            body = body[2:]
        else:
            base = 8
            body = body[1:]
    value = 0
    underscores = False
    for c in body:
        if c == "_":
            underscores = True
            continue
        if c.isascii() and c.isdigit():
            digit = ord(c) - ord("0")
        elif c.isascii() and c.isalpha():
            digit = ord(c.lower()) - ord("a") + 10
        else:
            raise GoParseError("parse error")
        if digit >= base:
            raise GoParseError("parse error")
        value = value * base + digit
    if underscores and not _underscore_ok(s):
        raise GoParseError("parse error")
    if neg:
        if value > _INT64_MAX + 1:
            raise GoParseError("value out of range")
        return -value
    if value > _INT64_MAX:
        raise GoParseError("value out of range")
    return value


_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_HEXFLOAT_RE = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+")
_SPECIAL_FLOATS = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}


def parse_float(s: str) -> float:
    """strconv.ParseFloat(s, 64): decimal or hex floats, Inf/Infinity/NaN (any case)."""
    body = s[1:] if s[:1] in ("+", "-") else s
    special = _SPECIAL_FLOATS.get(body.lower())
    if special is not None:
        if body.lower() == "nan" and body != s:
            raise GoParseError("parse error")
        return -special if s.startswith("-") else special
    if _FLOAT_RE.fullmatch(s):
        value = float(s)
    elif _HEXFLOAT_RE.fullmatch(s):
        value = float.fromhex(s)
    else:
        raise GoParseError("parse error")
    if math.isinf(value):
        raise GoParseError("value out of range")
    return value


_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": _NS_PER_S,
    "m": 60 * _NS_PER_S,
    "h": 3600 * _NS_PER_S,
}


def _leading_digits(s: str) -> tuple[str, str]:
    i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        i += 1
    return s[:i], s[i:]


def parse_duration(s: str) -> int:
    """time.ParseDuration: ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` or ``0``; returns nanoseconds."""
    orig = s
    invalid = GoParseError(f'time: invalid duration "{orig}"')
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise invalid
        int_digits, s = _leading_digits(s)
        whole = int(int_digits) if int_digits else 0
        if whole > 1 << 63:
            raise invalid
        frac_digits = ""
        if s.startswith("."):
            frac_digits, s = _leading_digits(s[1:])
            if not int_digits and not frac_digits:
                raise invalid
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        if i == 0:
            raise GoParseError(f'time: missing unit in duration "{orig}"')
        unit_name, s = s[:i], s[i:]
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise GoParseError(f'time: unknown unit "{unit_name}" in duration "{orig}"')
        if whole > (1 << 63) // unit:
            raise invalid
        value = whole * unit
        frac_digits = frac_digits[:18]  # Go stops accumulating before overflowing
        if frac_digits and int(frac_digits) > 0:
            value += int(float(int(frac_digits)) * (unit / 10 ** len(frac_digits)))
            if value > 1 << 63:
                raise invalid
        total += value
        if total > 1 << 63:
            raise invalid
    if neg:
        return -total
    if total > _INT64_MAX:
        raise invalid
    return total


def parse_duration_seconds(s: str) -> float:
    """time.ParseDuration, as float seconds."""
    return parse_duration(s) / _NS_PER_S


def _fmt_frac(v: int, prec: int) -> tuple[str, int]:
    """Go's fmtFrac: v / 10**prec as '.ddd' with trailing zeros dropped; returns (text, v)."""
    digits = ""
    printed = False
    for _ in range(prec):
        digit = v % 10
        printed = printed or digit != 0
        if printed:
            digits = str(digit) + digits
        v //= 10
    return ("." + digits if printed else ""), v


def format_duration(ns: int) -> str:
    """time.Duration.String: ``1m0s``, ``250ms``, ``1h0m0s``, ``1.5s``, ``0s``."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < _NS_PER_S:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            frac, whole = _fmt_frac(u, 3)
            return f"{sign}{whole}{frac}\u00b5s"
        frac, whole = _fmt_frac(u, 6)
        return f"{sign}{whole}{frac}ms"
    frac, secs = _fmt_frac(u, 9)
    out = f"{secs % 60}{frac}s"
    mins = secs // 60
    if mins > 0:
        out = f"{mins % 60}m" + out
        hours = mins // 60
        if hours > 0:
            out = f"{hours}h" + out
    return sign + out


def go_quote(s: str) -> str:
    """Go's %q for the common cases: double quotes and backslash escapes."""
    out = s.replace("\\", "\\\\").replace('"', '\\"')
    out = out.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f'"{out}"'
