"""The sans-IO codec of nsqlookupd's V1 protocol: lines, IDENTIFY bodies in any chunking, the
errors and their texts, REGISTER/UNREGISTER parameters and IDENTIFY's JSON as Go decodes it."""

from __future__ import annotations

import json
import struct

import pytest

from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.lookup_v1 import (
    MAGIC_V1,
    MAX_LINE_LENGTH,
    IdentifyBody,
    LookupCommand,
    LookupParser,
    decode_identify,
    encode_lookup_response,
    topic_and_channel,
)


def parse_all(data: bytes, chunk: int | None = None) -> list[LookupCommand]:
    parser = LookupParser()
    commands: list[LookupCommand] = []
    pieces = [data] if chunk is None else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        parser.feed(piece)
        while (command := parser.next_command()) is not None:
            commands.append(command)
    return commands


def identify(body: bytes) -> bytes:
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def error_of(parser: LookupParser) -> tuple[str, str]:
    with pytest.raises(ProtocolError) as info:
        parser.next_command()
    assert info.value.fatal is True
    return info.value.code, info.value.text


GOOD = {"broadcast_address": "h", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}


def test_magic_and_response_encoding() -> None:
    assert MAGIC_V1 == b"  V1"
    assert encode_lookup_response(b"OK") == b"\x00\x00\x00\x02OK"
    assert encode_lookup_response(b"") == b"\x00\x00\x00\x00"


STREAM = (
    b"PING\n"
    + identify(b'{"a":1}')
    + b"REGISTER topic channel\n"
    + b"  UNREGISTER topic \r\n"
    + b"\n"
    + b"REGISTER a  b extra\n"
    + identify(b"")
    + b"ping\n"
)
EXPECTED = [
    LookupCommand("PING", ()),
    LookupCommand("IDENTIFY", (), b'{"a":1}'),
    LookupCommand("REGISTER", ("topic", "channel")),
    LookupCommand("UNREGISTER", ("topic",)),
    LookupCommand("", ()),
    LookupCommand("REGISTER", ("a", "", "b", "extra")),
    LookupCommand("IDENTIFY", (), b""),
    LookupCommand("ping", ()),
]


@pytest.mark.parametrize("chunk", [None, 1, 2, 3, 5, 7, 64])
def test_commands_in_any_chunking(chunk: int | None) -> None:
    assert parse_all(STREAM, chunk) == EXPECTED


def test_go_trims_unicode_whitespace_but_not_other_bytes() -> None:
    # U+0085 (NEL) and U+3000 are spaces to Go's TrimSpace; U+00A0 inside stays.
    data = "\x85PING\u3000\n".encode() + "REGISTER t\xa0x\n".encode() + b"\x1fPING\n"
    assert parse_all(data) == [
        LookupCommand("PING", ()),
        LookupCommand("REGISTER", ("t\xa0x",)),
        LookupCommand("\x1fPING", ()),
    ]


def test_bytes_that_are_not_utf8_are_kept() -> None:
    (command,) = parse_all(b"REGISTER to\xffpic \xc3\n")
    assert command.params == ("to\udcffpic", "\udcc3")
    with pytest.raises(ProtocolError) as info:
        topic_and_channel("REGISTER", command.params)
    assert info.value.body == b"E_BAD_TOPIC REGISTER topic name 'to\xffpic' is not valid"


def test_a_partial_line_waits_and_ends_without_an_error() -> None:
    parser = LookupParser()
    parser.feed(b"REGIST")
    assert parser.next_command() is None
    parser.feed(b"ER t")
    assert parser.next_command() is None
    assert parser.buffered == 10
    parser.eof()  # nothing raised: Go closes without an answer


def test_eof_with_nothing_pending_raises_nothing() -> None:
    parser = LookupParser()
    parser.feed(b"PING\n")
    assert parser.next_command() == LookupCommand("PING", ())
    assert parser.next_command() is None
    parser.eof()


@pytest.mark.parametrize(
    ("tail", "text"),
    [
        (b"", "IDENTIFY failed to read body size"),
        (b"\x00\x00", "IDENTIFY failed to read body size"),
        (b"\x00\x00\x00\x05", "IDENTIFY failed to read body"),
        (b"\x00\x00\x00\x05{}", "IDENTIFY failed to read body"),
    ],
)
def test_identify_cut_short(tail: bytes, text: str) -> None:
    parser = LookupParser()
    parser.feed(b"IDENTIFY\n" + tail)
    assert parser.next_command() is None
    with pytest.raises(ProtocolError) as info:
        parser.eof()
    assert (info.value.code, info.value.text, info.value.fatal) == ("E_BAD_BODY", text, True)


def test_a_large_identify_body_arrives_in_pieces() -> None:
    body = b"x" * 200_000
    parser = LookupParser()
    parser.feed(identify(body)[:1000])
    assert parser.next_command() is None
    for start in range(1000, 200_013, 10_000):
        assert parser.next_command() is None
        parser.feed(identify(body)[start : start + 10_000])
    parser.feed(b"PING\n")
    assert parser.next_command() == LookupCommand("IDENTIFY", (), body)
    assert parser.next_command() == LookupCommand("PING", ())
    assert parser.buffered == 0


def test_a_negative_identify_size_is_an_error() -> None:
    parser = LookupParser()
    parser.feed(b"IDENTIFY\n\xff\xff\xff\xff")
    assert error_of(parser) == ("E_BAD_BODY", "IDENTIFY failed to read body")


def test_check_line_runs_before_the_body_arrives() -> None:
    seen: list[tuple[str, tuple[str, ...]]] = []

    def check(name: str, params: tuple[str, ...]) -> None:
        seen.append((name, params))
        if name == "IDENTIFY":
            raise ProtocolError("E_INVALID", "cannot IDENTIFY again")

    parser = LookupParser(check)
    parser.feed(b"PING x\nIDENTIFY\n")
    assert parser.next_command() == LookupCommand("PING", ("x",))
    assert error_of(parser) == ("E_INVALID", "cannot IDENTIFY again")
    assert seen == [("PING", ("x",)), ("IDENTIFY", ())]


def test_a_line_too_long_is_an_error_with_or_without_its_newline() -> None:
    parser = LookupParser()
    parser.feed(b"R" * (MAX_LINE_LENGTH - 1))
    assert parser.next_command() is None
    parser.feed(b"R")
    assert error_of(parser) == ("E_INVALID", "command line too long")

    parser = LookupParser()
    parser.feed(b"R" * MAX_LINE_LENGTH + b"\n")
    assert error_of(parser) == ("E_INVALID", "command line too long")


def test_the_longest_line_accepted() -> None:
    line = b"R" * (MAX_LINE_LENGTH - 1) + b"\n"
    assert parse_all(line) == [LookupCommand("R" * (MAX_LINE_LENGTH - 1), ())]


# -- REGISTER / UNREGISTER parameters --------------------------------------------------------


def test_topic_and_channel() -> None:
    assert topic_and_channel("REGISTER", ("t",)) == ("t", "")
    assert topic_and_channel("REGISTER", ("t", "c", "extra")) == ("t", "c")
    assert topic_and_channel("UNREGISTER", ("t#ephemeral", "c#ephemeral")) == (
        "t#ephemeral",
        "c#ephemeral",
    )
    # "REGISTER t  c": an empty channel means none (Go splits on single spaces)
    assert topic_and_channel("REGISTER", ("t", "", "c")) == ("t", "")


@pytest.mark.parametrize(
    ("command", "params", "code", "text"),
    [
        ("REGISTER", (), "E_INVALID", "REGISTER insufficient number of params"),
        ("UNREGISTER", (), "E_INVALID", "UNREGISTER insufficient number of params"),
        ("REGISTER", ("",), "E_BAD_TOPIC", "REGISTER topic name '' is not valid"),
        ("REGISTER", ("a*b",), "E_BAD_TOPIC", "REGISTER topic name 'a*b' is not valid"),
        (
            "UNREGISTER",
            ("x" * 65,),
            "E_BAD_TOPIC",
            f"UNREGISTER topic name '{'x' * 65}' is not valid",
        ),
        ("REGISTER", ("t", "c!"), "E_BAD_CHANNEL", "REGISTER channel name 'c!' is not valid"),
        ("UNREGISTER", ("bad!", "c!"), "E_BAD_TOPIC", "UNREGISTER topic name 'bad!' is not valid"),
    ],
)
def test_topic_and_channel_errors(
    command: str, params: tuple[str, ...], code: str, text: str
) -> None:
    with pytest.raises(ProtocolError) as info:
        topic_and_channel(command, params)
    assert (info.value.code, info.value.text, info.value.fatal) == (code, text, True)


# -- IDENTIFY's JSON -------------------------------------------------------------------------


def test_decode_identify_fields() -> None:
    body = json.dumps(
        {
            "hostname": "host",
            "broadcast_address": "10.0.0.1",
            "tcp_port": 4150,
            "http_port": 4151,
            "version": "1.3.0",
            "topology_zone": "z",
            "topology_region": "r",
            "remote_address": "ignored",
            "unknown": {"nested": [1, 2.5, None, "x"]},
        }
    ).encode()
    assert decode_identify(body) == IdentifyBody("host", "10.0.0.1", 4150, 4151, "1.3.0", "z", "r")


def test_decode_identify_matches_keys_as_go_does() -> None:
    body = (
        b'{"BROADCAST_ADDRESS":"h","Tcp_Port":1,"http_port":2,"version":"v",'
        b'"hostname":"first","HOSTNAME":"second","ver\xc5\xbfion":"folded"}'
    )
    # later duplicates win; U+017F folds to "s", so it sets version
    assert decode_identify(body) == IdentifyBody("second", "h", 1, 2, "folded")


def test_decode_identify_null_leaves_a_field_unset() -> None:
    body = b'{"broadcast_address":"h","tcp_port":1,"http_port":2,"version":"v","hostname":null}'
    assert decode_identify(body).hostname == ""


def test_decode_identify_accepts_negative_ports_as_go_does() -> None:
    body = b'{"broadcast_address":"h","tcp_port":-1,"http_port":9223372036854775807,"version":"v"}'
    assert decode_identify(body)[2:4] == (-1, 9223372036854775807)


def test_decode_identify_replaces_what_is_not_utf8() -> None:
    body = b'{"broadcast_address":"a\xff\xe2\x82b","tcp_port":1,"http_port":2,"version":"\\ud800"}'
    peer = decode_identify(body)
    assert peer.broadcast_address == "a\ufffd\ufffd\ufffdb"
    assert peer.version == "\ufffd"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"{",
        b"[]",
        b'"text"',
        b"1",
        b"{} x",
        b'{"tcp_port":1.0}',
        b'{"tcp_port":1e3}',
        b'{"tcp_port":"4150"}',
        b'{"tcp_port":true}',
        b'{"tcp_port":9223372036854775808}',
        b'{"tcp_port":NaN}',
        b'{"tcp_port":Infinity}',
        b'{"hostname":1}',
        b'{"remote_address":false}',
        b'{"version":["1"]}',
        b'{"hostname":1,"hostname":"fixed later"}',
        b'{"hostname":"a\tb"}',
        b"\xef\xbb\xbf{}",
    ],
)
def test_decode_identify_decode_errors(body: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_identify(body)
    assert (info.value.code, info.value.text) == (
        "E_BAD_BODY",
        "IDENTIFY failed to decode JSON body",
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"broadcast_address": ""},
        {"tcp_port": 0},
        {"http_port": 0},
        {"version": ""},
        {"broadcast_address": None},
    ],
)
def test_decode_identify_missing_fields(changes: dict[str, object]) -> None:
    fields = {**GOOD, **changes}
    with pytest.raises(ProtocolError) as info:
        decode_identify(json.dumps(fields).encode())
    assert (info.value.code, info.value.text) == ("E_BAD_BODY", "IDENTIFY missing fields")


@pytest.mark.parametrize("body", [b"null", b"{}", b' {"hostname":"h"} '])
def test_decode_identify_without_the_required_fields(body: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_identify(body)
    assert info.value.text == "IDENTIFY missing fields"
