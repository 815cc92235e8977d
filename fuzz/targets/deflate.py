"""The raw-DEFLATE stream nsqd reads an upgraded connection with
(trionsq.net.transport.DeflateStream) over a fake transport that delivers arbitrary bytes in
arbitrary splits; and a round trip through DeflateStream's own compressor.

What must hold: only `TransportError` escapes `receive_some`; each call returns at most
``max_bytes`` (bounded output, even for a decompression bomb); the decoded bytes do not
depend on the split; what one DeflateStream sends, split anyhow, another receives exactly.
"""

from __future__ import annotations

import trio

from trionsq.net.transport import DeflateStream, TransportError

from ..common import check, split_input


class _Fake(trio.abc.Stream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.sent: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sent.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        pass

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    async def aclose(self) -> None:
        pass


async def _decode(chunks: list[bytes], max_bytes: int) -> tuple[bytes, bool]:
    stream = DeflateStream(_Fake(chunks), 6)
    out = []
    total_in = sum(map(len, chunks))
    total = 0
    try:
        while piece := await stream.receive_some(max_bytes):
            check(len(piece) <= max_bytes, "receive_some over max_bytes")
            out.append(piece)
            total += len(piece)
            check(total <= 1032 * total_in + 1024, "more output than DEFLATE can encode")
    except TransportError:
        return b"".join(out), True
    return b"".join(out), False


async def _main(data: bytes) -> None:
    selector, chunks = split_input(data)
    whole = b"".join(chunks)
    max_bytes = 1 + (selector * 37) % 4096
    got, failed = await _decode(chunks, max_bytes)
    got_whole, failed_whole = await _decode([whole] if whole else [], 65536)
    check(failed == failed_whole, "error depends on the split")
    common = min(len(got), len(got_whole))  # a corrupt stream fails after more or less output
    check(got[:common] == got_whole[:common], "output depends on the split")
    if not failed:
        check(got == got_whole, "output depends on the split")
    sink = _Fake([])
    sender = DeflateStream(sink, 1 + selector % 9)
    for chunk in chunks:
        await sender.send_all(chunk)
    out, bad = await _decode(sink.sent, max_bytes)
    check(not bad and out == whole, "round trip failed")


def test_one_input(data: bytes) -> None:
    trio.run(_main, data)


def seeds() -> list[bytes]:
    import zlib

    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    stream = comp.compress(b"PUB topic\n\x00\x00\x00\x05hello" * 20) + comp.flush(zlib.Z_SYNC_FLUSH)
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    big = bomb.compress(b"\x00" * 200_000) + bomb.flush()
    return [b"\x00" + stream, b"\x01" + stream, b"\x13" + stream, b"\x05" + big, b"\x00\xff\xff"]
