"""trionsq.net.transport: the snappy and deflate stream wrappers over in-memory streams (round
trips in any chunking, hostile input), the TLS context from nsqd's flags, and the TLS stats."""

from __future__ import annotations

import dataclasses
import itertools
import os
import ssl
import struct
import zlib

import pytest
import snappy
import trio
import trio.testing
import trustme
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.net.transport import (
    DeflateStream,
    SnappyDecoder,
    SnappyStream,
    TransportError,
    tls_stats,
)
from trionsq.nsqd.options import NSQDOptions
from trionsq.nsqd.tls_config import build_server_context

STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"


#: Compressible and incompressible data, small and larger than a snappy block.
PAYLOADS = [
    b"OK",
    b"PUB topic\n" + struct.pack(">i", 5) + b"hello",
    os.urandom(3000),
    b"x" * 200_000,
    os.urandom(70_000) + b"y" * 70_000,
]


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


async def _receive_all(stream: trio.abc.Stream, total: int, max_bytes: int) -> bytes:
    out = bytearray()
    while len(out) < total:
        chunk = await stream.receive_some(max_bytes)
        assert chunk, "EOF before everything arrived"
        assert len(chunk) <= max_bytes
        out += chunk
    return bytes(out)


# -- snappy ---------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=40))
def test_snappy_decoder_any_chunking(cuts: list[int]) -> None:
    compressor = snappy.StreamCompressor()
    wire = b"".join(compressor.compress(p) for p in PAYLOADS)
    decoder = SnappyDecoder()
    out = b"".join(decoder.feed(piece) for piece in _split(wire, cuts))
    decoder.eof()
    assert out == b"".join(PAYLOADS)


def test_snappy_decoder_accepts_a_stream_identifier_per_write_and_skippable_chunks() -> None:
    # pynsq starts a new StreamCompressor (and so a new stream identifier) for every write.
    wire = snappy.StreamCompressor().compress(b"NOP\n") + snappy.StreamCompressor().compress(
        b"RDY 1\n"
    )
    padding = b"\xfe\x03\x00\x00abc" + b"\x80\x01\x00\x00z"
    decoder = SnappyDecoder()
    assert decoder.feed(wire[:10] + padding + wire[10:]) == b"NOP\nRDY 1\n"


async def test_snappy_stream_round_trip_both_ways() -> None:
    left, right = trio.testing.memory_stream_pair()
    a, b = SnappyStream(left), SnappyStream(right)
    for payload in PAYLOADS:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.send_all, payload)
            assert await _receive_all(b, len(payload), 65536) == payload
        async with trio.open_nursery() as nursery:
            nursery.start_soon(b.send_all, bytearray(payload))
            assert await _receive_all(a, len(payload), 1000) == payload


async def test_snappy_stream_compresses_each_send_as_one_unit() -> None:
    """One send_all, one write beneath: the identifier first, then the data's chunks."""
    left, right = trio.testing.memory_stream_pair()
    stream = SnappyStream(left)
    await stream.send_all(b"a" * 100)
    first = await right.receive_some()
    assert first.startswith(STREAM_IDENTIFIER)
    await stream.send_all(b"b" * 100)
    second = await right.receive_some()
    assert not second.startswith(STREAM_IDENTIFIER)
    decoder = SnappyDecoder()
    assert decoder.feed(first + second) == b"a" * 100 + b"b" * 100


async def test_snappy_stream_never_returns_empty_before_eof() -> None:
    """Bytes that complete no chunk (or only a stream identifier) are not an EOF."""
    left, right = trio.testing.memory_stream_pair()
    stream = SnappyStream(right)
    wire = snappy.StreamCompressor().compress(b"hello")
    for byte in wire[:-1]:
        await left.send_all(bytes([byte]))
    with trio.move_on_after(0.1) as scope:
        await stream.receive_some(100)
    assert scope.cancelled_caught
    await left.send_all(wire[-1:])
    assert await stream.receive_some(100) == b"hello"
    await left.send_eof()
    assert await stream.receive_some(100) == b""


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b"PUB t\n", "snappy: corrupt input (no stream identifier)"),
        (b"\xff\x06\x00\x00sNaPpZ", "snappy: corrupt input (bad stream identifier)"),
        (STREAM_IDENTIFIER + b"\x02\x01\x00\x00x", "snappy: unsupported input"),
        (STREAM_IDENTIFIER + b"\x80\xff\xff\xff", "snappy: unsupported input"),
        (STREAM_IDENTIFIER + b"\x00\x02\x00\x00ab", "snappy: corrupt input"),
        (STREAM_IDENTIFIER + b"\x01\x09\x00\x00\x00\x00\x00\x00hello", "snappy: corrupt input"),
    ],
)
def test_snappy_decoder_refuses_what_golang_snappy_refuses(wire: bytes, error: str) -> None:
    with pytest.raises(TransportError) as info:
        SnappyDecoder().feed(wire)
    assert str(info.value).startswith(error)


def test_snappy_decoder_checks_the_crc() -> None:
    wire = bytearray(snappy.StreamCompressor().compress(b"hello world " * 10))
    wire[len(STREAM_IDENTIFIER) + 4] ^= 0x01  # the chunk's checksum
    with pytest.raises(TransportError, match="snappy: corrupt input"):
        SnappyDecoder().feed(bytes(wire))


def test_snappy_decoder_refuses_a_huge_decoded_length() -> None:
    body = b"\x80\x80\x80\x80\x04" + b"\x00" * 10  # claims 1 GiB
    chunk = b"\x00" + (len(body) + 4).to_bytes(3, "little") + b"\x00" * 4 + body
    with pytest.raises(TransportError):
        SnappyDecoder().feed(STREAM_IDENTIFIER + chunk)


async def test_snappy_eof_inside_a_chunk_is_an_error() -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = SnappyStream(right)
    await left.send_all(snappy.StreamCompressor().compress(b"hello")[:-2])
    await left.send_eof()
    with pytest.raises(TransportError):
        await stream.receive_some(100)


async def test_snappy_garbage_raises_a_broken_resource_error() -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = SnappyStream(right)
    await left.send_all(os.urandom(5000))
    with pytest.raises(trio.BrokenResourceError):
        await stream.receive_some(65536)


# -- deflate --------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=40),
    level=st.integers(min_value=1, max_value=9),
    max_bytes=st.sampled_from([1, 7, 4096, 65536]),
)
async def test_deflate_stream_any_chunking(cuts: list[int], level: int, max_bytes: int) -> None:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    plain = b"".join(PAYLOADS[:4])
    wire = b"".join(
        compressor.compress(p) + compressor.flush(zlib.Z_SYNC_FLUSH) for p in PAYLOADS[:4]
    )
    left, right = trio.testing.memory_stream_pair()
    stream = DeflateStream(right, level)

    async def send() -> None:
        for piece in _split(wire, cuts):
            await left.send_all(piece)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        if max_bytes == 1:
            plain = plain[:3000]  # byte by byte: keep it short
        assert await _receive_all(stream, len(plain), max_bytes) == plain


async def test_deflate_stream_round_trip_and_sync_flush_per_send() -> None:
    left, right = trio.testing.memory_stream_pair()
    a, b = DeflateStream(left, 6), DeflateStream(right, 1)
    for payload in PAYLOADS:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.send_all, payload)
            assert await _receive_all(b, len(payload), 65536) == payload
        async with trio.open_nursery() as nursery:
            nursery.start_soon(b.send_all, bytearray(payload))
            assert await _receive_all(a, len(payload), 65536) == payload
    # A sync flush ends every write with the empty stored block 00 00 ff ff.
    await a.send_all(b"OK")
    assert (await right.receive_some()).endswith(b"\x00\x00\xff\xff")


async def test_deflate_bomb_is_decoded_a_bounded_piece_at_a_time() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    wire = compressor.compress(b"\0" * 20_000_000) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert len(wire) < 30_000
    left, right = trio.testing.memory_stream_pair()
    stream = DeflateStream(right, 6)
    await left.send_all(wire)
    total = 0
    while total < 20_000_000:
        chunk = await stream.receive_some(65536)
        assert 0 < len(chunk) <= 65536
        total += len(chunk)
    assert total == 20_000_000


async def test_deflate_garbage_raises_a_broken_resource_error() -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = DeflateStream(right, 6)
    await left.send_all(b"\xff" * 100)
    with pytest.raises(TransportError, match="flate: corrupt input"):
        await stream.receive_some(65536)


async def test_deflate_end_of_stream_and_eof_read_as_eof() -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = DeflateStream(right, 6)
    await left.send_all(_raw_deflate_final(b"NOP\n"))
    assert await stream.receive_some(100) == b"NOP\n"
    assert await stream.receive_some(100) == b""  # the final block ended the stream
    left2, right2 = trio.testing.memory_stream_pair()
    stream2 = DeflateStream(right2, 6)
    await left2.send_eof()
    assert await stream2.receive_some(100) == b""


async def test_deflate_bytes_after_the_final_block_end_the_stream_without_spinning() -> None:
    # Fuzz finding (fuzz/regressions/deflate/): output limited by max_bytes up to the final
    # block left the trailing bytes in zlib's unconsumed_tail; receive_some then decompressed
    # them to b"" forever, blocking the event loop.
    left, right = trio.testing.memory_stream_pair()
    stream = DeflateStream(right, 6)
    body = os.urandom(500)
    await left.send_all(_raw_deflate_final(body) + b"trailing bytes")
    got = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(7):
            got += chunk
    assert got == body


async def test_deflate_output_zlib_holds_back_is_returned_before_reading_on() -> None:
    # Fuzz finding (fuzz/regressions/deflate/): when a receive_some filled max_bytes just as
    # its input ran out, zlib kept decoded output back; the next call read from the socket
    # instead (a stall until the peer sent more, or the output lost at the end).
    wire = _raw_deflate_final(b"x" * 20_000)
    left, right = trio.testing.lockstep_stream_pair()
    stream = DeflateStream(right, 6)

    async def peer() -> None:
        await left.send_all(wire[:1])
        await left.send_all(wire[1:])
        await left.send_eof()

    got = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer)
        with trio.fail_after(5):
            while chunk := await stream.receive_some(100):
                got += chunk
    assert got == b"x" * 20_000


def _raw_deflate_final(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


async def test_wrappers_refuse_two_concurrent_senders() -> None:
    for wrap in (SnappyStream, lambda s: DeflateStream(s, 6)):
        left, right = trio.testing.lockstep_stream_pair()
        stream = wrap(left)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, b"x" * 10)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await stream.send_all(b"y")
            await right.receive_some()


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def server_pem(ca: trustme.CA, tmp_path) -> str:
    path = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(path))
    return str(path)


def _options(**overrides: object) -> NSQDOptions:
    return dataclasses.replace(NSQDOptions(), **overrides)


def test_no_certificate_no_context() -> None:
    assert build_server_context(_options()) is None


@pytest.mark.parametrize(
    ("policy", "verify_mode"),
    [
        ("", ssl.CERT_NONE),
        ("require", ssl.CERT_REQUIRED),
        ("require-verify", ssl.CERT_REQUIRED),
    ],
)
def test_client_auth_policy(ca: trustme.CA, server_pem: str, tmp_path, policy, verify_mode):
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    context = build_server_context(
        _options(
            tls_cert=server_pem,
            tls_key=server_pem,
            tls_client_auth_policy=policy,
            tls_root_ca_file=str(ca_path),
        )
    )
    assert context is not None
    assert context.verify_mode == verify_mode


@pytest.mark.parametrize(
    ("name", "version"),
    [("tls1.2", ssl.TLSVersion.TLSv1_2), ("tls1.3", ssl.TLSVersion.TLSv1_3)],
)
def test_min_version(server_pem: str, name: str, version: ssl.TLSVersion) -> None:
    context = build_server_context(
        _options(tls_cert=server_pem, tls_key=server_pem, tls_min_version=name)
    )
    assert context is not None and context.minimum_version == version


def test_tls10_minimum_sets_without_a_deprecation_error(server_pem: str) -> None:
    context = build_server_context(_options(tls_cert=server_pem, tls_key=server_pem))
    assert context is not None and context.minimum_version == ssl.TLSVersion.TLSv1


@pytest.mark.parametrize("which", ["cert", "key", "ca"])
def test_unusable_files_raise(server_pem: str, tmp_path, which: str) -> None:
    missing = str(tmp_path / "missing.pem")
    fields = {"tls_cert": server_pem, "tls_key": server_pem}
    fields["tls_root_ca_file" if which == "ca" else f"tls_{which}"] = missing
    with pytest.raises(OSError):
        build_server_context(_options(**fields))


async def test_tls_stats_name_things_as_go_does(ca: trustme.CA, server_pem: str) -> None:
    context = build_server_context(_options(tls_cert=server_pem, tls_key=server_pem))
    assert context is not None
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    left, right = trio.testing.memory_stream_pair()
    server = trio.SSLStream(right, context, server_side=True)
    client = trio.SSLStream(left, client_ctx, server_hostname="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        await client.do_handshake()
    stats = tls_stats(server)
    assert stats["tls"] is True
    assert stats["tls_version"] == "TLS1.3"
    assert stats["tls_cipher_suite"] in ("Unknown 4865", "Unknown 4866", "Unknown 4867")
    assert stats["tls_negotiated_protocol"] == ""
    assert stats["tls_negotiated_protocol_is_mutual"] is True
    assert tls_stats(None)["tls"] is False

    # TLS 1.2 with ECDHE-ECDSA-AES128-GCM-SHA256 (trustme issues ECDSA keys): a suite Go names.
    client_ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    client_ctx.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    left, right = trio.testing.memory_stream_pair()
    server = trio.SSLStream(right, context, server_side=True)
    client = trio.SSLStream(left, client_ctx, server_hostname="127.0.0.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        await client.do_handshake()
    stats = tls_stats(server)
    assert stats["tls_version"] == "TLS1.2"
    assert stats["tls_cipher_suite"] == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
