"""Go's ``%q`` quoting of a byte string, which nsqd uses in its error texts."""

from __future__ import annotations

_ESCAPES = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v"}


def go_quote(data: bytes) -> str:
    """Like Go's strconv.Quote: a double-quoted string with Go escapes."""
    out = ['"']
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            if b == 0x22 or b == 0x5C:
                out.append("\\" + chr(b))
            elif 0x20 <= b < 0x7F:
                out.append(chr(b))
            elif b in _ESCAPES:
                out.append(_ESCAPES[b])
            else:
                out.append(f"\\x{b:02x}")
            i += 1
            continue
        for width in (2, 3, 4):
            try:
                ch = data[i : i + width].decode("utf-8")
            except UnicodeDecodeError:
                continue
            break
        else:
            out.append(f"\\x{b:02x}")
            i += 1
            continue
        code = ord(ch)
        if ch.isprintable():
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
        i += width
    out.append('"')
    return "".join(out)
