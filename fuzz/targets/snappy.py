"""The snappy framing-format decoder nsqd reads an upgraded connection with
(trionsq.net.transport.SnappyDecoder), fed arbitrary bytes in arbitrary splits; and a round
trip of the raw input through python-snappy's StreamCompressor (what peers send).

What must hold: only `TransportError` escapes `feed`/`eof`; output is bounded (each feed
returns at most 64 KiB per complete chunk, and no chunk is 4 bytes or shorter of input, so at
most 64 KiB per 8 input bytes); the decoded bytes do not depend on the split; a compressed
stream, split anyhow, decodes to exactly what was compressed.
"""

from __future__ import annotations

import snappy

from trionsq.net.transport import SnappyDecoder, TransportError

from ..common import check, split_input


def _decode(chunks: list[bytes]) -> tuple[bytes, bool]:
    dec = SnappyDecoder()
    out = []
    fed = 0
    produced = 0
    try:
        for chunk in chunks:
            fed += len(chunk)
            piece = dec.feed(chunk)
            produced += len(piece)
            check(produced <= 65536 * (fed // 8 + 1), "unbounded output")
            out.append(piece)
        dec.eof()
    except TransportError:
        return b"".join(out), True
    return b"".join(out), False


def test_one_input(data: bytes) -> None:
    selector, chunks = split_input(data)
    whole = b"".join(chunks)
    got, failed = _decode(chunks)
    got_whole, failed_whole = _decode([whole] if whole else [])
    check(failed == failed_whole, "error depends on the split")
    if not failed:
        check(got == got_whole, "output depends on the split")
    compressed = snappy.StreamCompressor().compress(whole)
    step = 1 + selector % 97
    parts = [compressed[i : i + step] for i in range(0, len(compressed), step)]
    out, bad = _decode(parts)
    check(not bad and out == whole, "round trip failed")


def seeds() -> list[bytes]:
    comp = snappy.StreamCompressor()
    stream = comp.compress(b"PUB topic\n\x00\x00\x00\x05hello" * 20) + comp.compress(b"NOP\n")
    return [
        b"\x00" + stream,
        b"\x01" + stream,
        b"\x0d" + stream,
        b"\x00\xff\x06\x00\x00sNaPpY\x01\x08\x00\x00\x00\x00\x00\x00abcd",
        b"\x00\xff\x06\x00\x00sNaPpY\xfe\x02\x00\x00xx",
    ]
