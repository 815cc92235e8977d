"""CommandParser against the V2 command grammar and nsqd's error texts (docs/protocol.md §1.3-1.4).

Expectations are written from the reference, not from the code. The central property: the
parser's output (commands, then maybe one error) does not depend on how the byte stream is
cut into reads.
"""

from __future__ import annotations

import json
import os
import random
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.protocol import Command, CommandParser, ProtocolError, parse_uint
from trionsq.protocol import parser as parser_module
from trionsq.protocol.parser import MAX_LINE_LENGTH

MAX_MSG = 1024 * 1024
MAX_BODY = 5 * 1024 * 1024


def size(n: int) -> bytes:
    return struct.pack(">i", n)


def body_cmd(line: bytes, body: bytes) -> bytes:
    return line + b"\n" + size(len(body)) + body


def mpub_body(bodies: list[bytes], count: int | None = None) -> bytes:
    parts = [size(len(bodies) if count is None else count)]
    for b in bodies:
        parts += [size(len(b)), b]
    return b"".join(parts)


def run(chunks: list[bytes], **kw: object) -> tuple[list[Command], ProtocolError | None]:
    """Feed `chunks` one by one, draining commands after each; stop at the first error."""
    parser = CommandParser(**kw)  # type: ignore[arg-type]
    out: list[Command] = []
    for chunk in chunks:
        parser.feed(chunk)
        try:
            while (cmd := parser.next_command()) is not None:
                out.append(cmd)
        except ProtocolError as exc:
            return out, exc
    return out, None


def run_whole(data: bytes, **kw: object) -> tuple[list[Command], ProtocolError | None]:
    return run([data], **kw)


def err_key(exc: ProtocolError | None) -> tuple[str, str, bool] | None:
    return None if exc is None else (exc.code, exc.text, exc.fatal)


def one(data: bytes, **kw: object) -> Command:
    cmds, exc = run_whole(data, **kw)
    assert exc is None, exc
    assert len(cmds) == 1, cmds
    return cmds[0]


def error_of(data: bytes, **kw: object) -> tuple[str, str, bool]:
    _, exc = run_whole(data, **kw)
    assert exc is not None, "expected a ProtocolError"
    key = err_key(exc)
    assert key is not None
    return key


# --------------------------------------------------------------------------------------
# The twelve commands


def test_identify() -> None:
    body = json.dumps({"client_id": "c", "feature_negotiation": True}).encode()
    assert one(body_cmd(b"IDENTIFY", body)) == Command(b"IDENTIFY", (), body)


def test_auth() -> None:
    assert one(body_cmd(b"AUTH", b"s3cret")) == Command(b"AUTH", (), b"s3cret")


def test_sub() -> None:
    assert one(b"SUB topic chan\n") == Command(b"SUB", (b"topic", b"chan"), None)


def test_pub() -> None:
    assert one(body_cmd(b"PUB topic", b"hello")) == Command(b"PUB", (b"topic",), b"hello")


def test_pub_body_may_hold_newlines_and_nuls() -> None:
    body = b"a\nb\r\n\x00 PUB x\n"
    assert one(body_cmd(b"PUB t", body)).body == body


def test_mpub_body_is_a_list_of_bodies() -> None:
    bodies = [b"one", b"two\n", b"x" * 300]
    cmd = one(body_cmd(b"MPUB topic", mpub_body(bodies)))
    assert cmd == Command(b"MPUB", (b"topic",), bodies)
    assert isinstance(cmd.body, list)


def test_mpub_single_message() -> None:
    assert one(body_cmd(b"MPUB t", mpub_body([b"m"]))).body == [b"m"]


def test_dpub() -> None:
    assert one(body_cmd(b"DPUB topic 1500", b"later")) == Command(
        b"DPUB", (b"topic", b"1500"), b"later"
    )


def test_rdy() -> None:
    assert one(b"RDY 100\n") == Command(b"RDY", (b"100",), None)
    assert one(b"RDY\n") == Command(b"RDY", (), None)  # count optional (nsqd: missing = 1)


def test_fin() -> None:
    assert one(b"FIN 0123456789abcdef\n") == Command(b"FIN", (b"0123456789abcdef",), None)


def test_req() -> None:
    assert one(b"REQ 0123456789abcdef 5000\n") == Command(
        b"REQ", (b"0123456789abcdef", b"5000"), None
    )


def test_touch() -> None:
    assert one(b"TOUCH 0123456789abcdef\n") == Command(b"TOUCH", (b"0123456789abcdef",), None)


def test_nop_and_cls() -> None:
    assert one(b"NOP\n") == Command(b"NOP", (), None)
    assert one(b"CLS\n") == Command(b"CLS", (), None)


def test_trailing_cr_is_stripped_once() -> None:
    assert one(b"FIN 0123456789abcdef\r\n") == Command(b"FIN", (b"0123456789abcdef",), None)
    assert one(b"NOP\r\n") == Command(b"NOP", (), None)
    # Only one \r goes; the other stays part of the name.
    assert one(b"NOP\r\r\n") == Command(b"NOP\r", (), None)
    assert one(body_cmd(b"PUB t\r", b"x")) == Command(b"PUB", (b"t",), b"x")


def test_split_on_every_single_space() -> None:
    assert one(b"REQ  id\n") == Command(b"REQ", (b"", b"id"), None)
    assert one(b"RDY \n") == Command(b"RDY", (b"",), None)
    assert one(b"SUB a b c\n") == Command(b"SUB", (b"a", b"b", b"c"), None)
    # A tab is not a separator.
    assert one(b"RDY\t1\n") == Command(b"RDY\t1", (), None)


def test_names_are_case_sensitive_and_unknown_names_pass_through() -> None:
    # nsqd rejects an unknown command (E_INVALID invalid command X) when executing it; the
    # parser hands it on as a body-less command, so `pub` never waits for a body.
    assert one(b"pub t\n") == Command(b"pub", (b"t",), None)
    assert one(b"BOGUS 1 2\n") == Command(b"BOGUS", (b"1", b"2"), None)
    assert one(b"\n") == Command(b"", (), None)


def test_incomplete_input_gives_none() -> None:
    p = CommandParser()
    for data in (b"FI", b"N 0123", b"456789abcdef"):
        p.feed(data)
        assert p.next_command() is None
    p.feed(b"\nPUB t\n\x00\x00")
    assert p.next_command() == Command(b"FIN", (b"0123456789abcdef",), None)
    assert p.next_command() is None
    p.feed(b"\x00\x02h")
    assert p.next_command() is None
    p.feed(b"i")
    assert p.next_command() == Command(b"PUB", (b"t",), b"hi")
    assert p.next_command() is None
    assert p.buffered == 0


def test_buffered_counts_unconsumed_bytes() -> None:
    p = CommandParser()
    p.feed(b"NOP\nPUB t\n" + size(10) + b"abc")
    assert p.next_command() == Command(b"NOP", (), None)
    assert p.next_command() is None
    assert p.buffered == 4 + 3
    p.feed(b"defg")
    assert p.buffered == 4 + 7


def test_large_body_in_many_chunks() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    data = body_cmd(b"PUB t", body) + b"NOP\n"
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    cmds, exc = run(chunks)
    assert exc is None
    assert cmds == [Command(b"PUB", (b"t",), body), Command(b"NOP", (), None)]


# --------------------------------------------------------------------------------------
# Error paths (texts and fatality from docs/protocol.md §1.3; all of these are fatal)

E = pytest.param


@pytest.mark.parametrize(
    ("data", "code", "text"),
    [
        # PUB
        E(b"PUB\n", "E_INVALID", "PUB insufficient number of parameters", id="pub-params"),
        E(
            b"PUB bad!topic\n",
            "E_BAD_TOPIC",
            'PUB topic name "bad!topic" is not valid',
            id="pub-topic",
        ),
        E(b"PUB \n", "E_BAD_TOPIC", 'PUB topic name "" is not valid', id="pub-empty-topic"),
        E(
            b"PUB t\n" + size(0),
            "E_BAD_MESSAGE",
            "PUB invalid message body size 0",
            id="pub-size-0",
        ),
        E(
            b"PUB t\n" + size(-5),
            "E_BAD_MESSAGE",
            "PUB invalid message body size -5",
            id="pub-size-neg",
        ),
        E(
            b"PUB t\n" + size(MAX_MSG + 1),
            "E_BAD_MESSAGE",
            f"PUB message too big {MAX_MSG + 1} > {MAX_MSG}",
            id="pub-too-big",
        ),
        # DPUB
        E(b"DPUB t\n", "E_INVALID", "DPUB insufficient number of parameters", id="dpub-params"),
        E(b"DPUB\n", "E_INVALID", "DPUB insufficient number of parameters", id="dpub-no-params"),
        E(b"DPUB b@d 10\n", "E_BAD_TOPIC", 'DPUB topic name "b@d" is not valid', id="dpub-topic"),
        E(b"DPUB t -1\n", "E_INVALID", "DPUB could not parse timeout -1", id="dpub-negative"),
        E(b"DPUB t 1s\n", "E_INVALID", "DPUB could not parse timeout 1s", id="dpub-unit"),
        E(
            b"DPUB t 3600001\n",
            "E_INVALID",
            "DPUB timeout 3600001 out of range 0-3600000",
            id="dpub-range",
        ),
        E(
            b"DPUB t 10\n" + size(0),
            "E_BAD_MESSAGE",
            "DPUB invalid message body size 0",
            id="dpub-size-0",
        ),
        E(
            b"DPUB t 10\n" + size(MAX_MSG + 1),
            "E_BAD_MESSAGE",
            f"DPUB message too big {MAX_MSG + 1} > {MAX_MSG}",
            id="dpub-too-big",
        ),
        # MPUB
        E(b"MPUB\n", "E_INVALID", "MPUB insufficient number of parameters", id="mpub-params"),
        E(
            b"MPUB bad/topic\n",
            "E_BAD_TOPIC",
            'E_BAD_TOPIC MPUB topic name "bad/topic" is not valid',
            id="mpub-topic-quirk",
        ),
        E(b"MPUB t\n" + size(0), "E_BAD_BODY", "MPUB invalid body size 0", id="mpub-size-0"),
        E(b"MPUB t\n" + size(-1), "E_BAD_BODY", "MPUB invalid body size -1", id="mpub-size-neg"),
        E(
            b"MPUB t\n" + size(MAX_BODY + 1),
            "E_BAD_BODY",
            f"MPUB body too big {MAX_BODY + 1} > {MAX_BODY}",
            id="mpub-too-big",
        ),
        E(
            b"MPUB t\n" + size(100) + size(0),
            "E_BAD_BODY",
            "MPUB invalid message count 0",
            id="mpub-count-0",
        ),
        E(
            b"MPUB t\n" + size(100) + size(-3),
            "E_BAD_BODY",
            "MPUB invalid message count -3",
            id="mpub-count-neg",
        ),
        E(
            b"MPUB t\n" + size(100) + size((MAX_BODY - 4) // 5 + 1),
            "E_BAD_BODY",
            f"MPUB invalid message count {(MAX_BODY - 4) // 5 + 1}",
            id="mpub-count-big",
        ),
        E(
            b"MPUB t\n" + size(100) + size(3) + size(1) + b"a" + size(0),
            "E_BAD_MESSAGE",
            "MPUB invalid message(1) body size 0",
            id="mpub-msg-0",
        ),
        E(
            b"MPUB t\n" + size(100) + size(3) + size(-7),
            "E_BAD_MESSAGE",
            "MPUB invalid message(0) body size -7",
            id="mpub-msg-neg",
        ),
        E(
            b"MPUB t\n" + size(100) + size(2) + size(1) + b"a" + size(MAX_MSG + 1),
            "E_BAD_MESSAGE",
            f"MPUB message too big {MAX_MSG + 1} > {MAX_MSG}",
            id="mpub-msg-big",
        ),
        # IDENTIFY / AUTH bodies
        E(
            b"IDENTIFY\n" + size(0),
            "E_BAD_BODY",
            "IDENTIFY invalid body size 0",
            id="identify-size-0",
        ),
        E(
            b"IDENTIFY\n" + size(-2),
            "E_BAD_BODY",
            "IDENTIFY invalid body size -2",
            id="identify-size-neg",
        ),
        E(
            b"IDENTIFY\n" + size(MAX_BODY + 1),
            "E_BAD_BODY",
            f"IDENTIFY body too big {MAX_BODY + 1} > {MAX_BODY}",
            id="identify-too-big",
        ),
        E(b"AUTH x\n", "E_INVALID", "AUTH invalid number of parameters", id="auth-params"),
        E(b"AUTH \n", "E_INVALID", "AUTH invalid number of parameters", id="auth-empty-param"),
        E(b"AUTH\n" + size(0), "E_BAD_BODY", "AUTH invalid body size 0", id="auth-size-0"),
        E(
            b"AUTH\n" + size(MAX_BODY + 1),
            "E_BAD_BODY",
            f"AUTH body too big {MAX_BODY + 1} > {MAX_BODY}",
            id="auth-too-big",
        ),
    ],
)
def test_error(data: bytes, code: str, text: str) -> None:
    assert error_of(data) == (code, text, True)


def test_error_body_is_code_space_text() -> None:
    _, exc = run_whole(b"PUB\n")
    assert exc is not None
    assert exc.body == b"E_INVALID PUB insufficient number of parameters"


def test_topic_name_shown_as_go_quotes_it() -> None:
    # nsqd formats the name with Go's %q.
    assert error_of(b'PUB a"b\n')[1] == 'PUB topic name "a\\"b" is not valid'
    assert error_of(b"PUB a\tb\n")[1] == 'PUB topic name "a\\tb" is not valid'
    assert error_of(b"PUB \xff\n")[1] == 'PUB topic name "\\xff" is not valid'
    assert error_of(b"PUB t\xc3\xa9\n")[1] == 'PUB topic name "t\u00e9" is not valid'


def test_dpub_unparsable_timeout_echoes_raw_bytes() -> None:
    _, exc = run_whole(b"DPUB t 1\xff\n")
    assert exc is not None
    assert exc.body == b"E_INVALID DPUB could not parse timeout 1\xff"


def test_limits_are_configurable() -> None:
    assert error_of(body_cmd(b"PUB t", b"x" * 11), max_msg_size=10) == (
        "E_BAD_MESSAGE",
        "PUB message too big 11 > 10",
        True,
    )
    assert error_of(b"MPUB t\n" + size(5) + size(3), max_body_size=14) == (
        "E_BAD_BODY",
        "MPUB invalid message count 3",  # (14 - 4) // 5 == 2
        True,
    )
    assert one(body_cmd(b"MPUB t", mpub_body([b"a", b"b"])), max_body_size=14).body == [b"a", b"b"]
    assert error_of(b"DPUB t 1001\n", max_req_timeout_ms=1000) == (
        "E_INVALID",
        "DPUB timeout 1001 out of range 0-1000",
        True,
    )
    assert one(body_cmd(b"DPUB t 1000", b"x"), max_req_timeout_ms=1000).params == (b"t", b"1000")


def test_dpub_timeout_edges() -> None:
    assert one(body_cmd(b"DPUB t 0", b"x")).params == (b"t", b"0")
    assert one(body_cmd(b"DPUB t 3600000", b"x")).params == (b"t", b"3600000")
    # nsqd's ByteToBase10 reads "" as 0.
    assert one(body_cmd(b"DPUB t ", b"x")).params == (b"t", b"")
    # ms * 1e6 overflows int64 in Go and goes negative: out of range, not accepted.
    big = (1 << 63) // 1_000_000 + 1
    assert error_of(b"DPUB t %d\n" % big) == (
        "E_INVALID",
        f"DPUB timeout {big} out of range 0-3600000",
        True,
    )


@pytest.mark.parametrize(
    "line",
    [b"PUB", b"PUB b!d", b"MPUB", b"MPUB b!d", b"DPUB t", b"DPUB b!d 1", b"DPUB t x", b"AUTH a"],
)
def test_pre_body_checks_raise_without_any_body(line: bytes) -> None:
    # nsqd makes these checks before reading the body: the error must come as soon as the
    # line is complete, even if no body byte ever arrives.
    p = CommandParser()
    p.feed(line + b"\n")
    with pytest.raises(ProtocolError):
        p.next_command()


def test_size_checks_raise_as_soon_as_the_size_is_in() -> None:
    for line, sz in ((b"PUB t", 0), (b"MPUB t", -1), (b"IDENTIFY", MAX_BODY + 1)):
        p = CommandParser()
        p.feed(line + b"\n" + size(sz)[:3])
        assert p.next_command() is None
        p.feed(size(sz)[3:])
        with pytest.raises(ProtocolError):
            p.next_command()


def test_mpub_message_checks_raise_before_the_rest_of_the_body() -> None:
    # nsqd reads MPUB message by message, so a bad message size is reported at once.
    p = CommandParser()
    p.feed(b"MPUB t\n" + size(1000) + size(10) + size(1) + b"a" + size(-1))
    with pytest.raises(ProtocolError) as info:
        p.next_command()
    assert info.value.text == "MPUB invalid message(1) body size -1"


def test_mpub_count_checked_before_messages() -> None:
    p = CommandParser()
    p.feed(b"MPUB t\n" + size(9) + size(0))
    with pytest.raises(ProtocolError) as info:
        p.next_command()
    assert info.value.text == "MPUB invalid message count 0"


def test_mpub_reads_messages_from_the_stream_not_the_declared_size() -> None:
    # Reference §1.3 MPUB quirk: the declared body size is only checked against the limit.
    msgs = mpub_body([b"abc", b"de"])
    for declared in (1, len(msgs), len(msgs) + 100, MAX_BODY):
        cmds, exc = run_whole(b"MPUB t\n" + size(declared) + msgs + b"NOP\n")
        assert exc is None
        assert cmds == [Command(b"MPUB", (b"t",), [b"abc", b"de"]), Command(b"NOP", (), None)]


def test_check_line_runs_first_and_for_every_command() -> None:
    seen: list[tuple[bytes, tuple[bytes, ...]]] = []

    def check(name: bytes, params: tuple[bytes, ...]) -> None:
        seen.append((name, params))
        if name == b"CLS":
            raise ProtocolError("E_INVALID", "cannot CLS in current state")

    data = b"NOP\n" + body_cmd(b"PUB t", b"x") + b"CLS\n"
    cmds, exc = run_whole(data, check_line=check)
    assert cmds == [Command(b"NOP", (), None), Command(b"PUB", (b"t",), b"x")]
    assert err_key(exc) == ("E_INVALID", "cannot CLS in current state", True)
    assert seen == [(b"NOP", ()), (b"PUB", (b"t",)), (b"CLS", ())]

    # The state check comes before AUTH's own parameter check (nsqd's order).
    def deny_auth(name: bytes, params: tuple[bytes, ...]) -> None:
        if name == b"AUTH":
            raise ProtocolError("E_INVALID", "cannot AUTH in current state")

    assert error_of(b"AUTH x\n", check_line=deny_auth)[1] == "cannot AUTH in current state"


def test_line_too_long() -> None:
    # nsqd's 16 KiB line reader: a line must fit with its newline.
    ok = b"NOP " + b"a" * (MAX_LINE_LENGTH - 5) + b"\n"
    assert len(ok) == MAX_LINE_LENGTH
    assert one(ok).name == b"NOP"
    bad = b"NOP " + b"a" * (MAX_LINE_LENGTH - 4) + b"\n"
    assert error_of(bad)[0] == "E_INVALID"
    # Without a newline: the error comes once the reader's buffer is full.
    p = CommandParser()
    p.feed(b"x" * (MAX_LINE_LENGTH - 1))
    assert p.next_command() is None
    p.feed(b"x")
    with pytest.raises(ProtocolError):
        p.next_command()


def test_line_too_long_whatever_the_chunking() -> None:
    bad = b"NOP " + b"a" * MAX_LINE_LENGTH + b"\nNOP\n"
    whole = run_whole(bad)
    assert whole[1] is not None
    for step in (1000, 7, len(bad) - 3):
        cmds, exc = run([bad[i : i + step] for i in range(0, len(bad), step)])
        assert (cmds, err_key(exc)) == (whole[0], err_key(whole[1]))


# --------------------------------------------------------------------------------------
# EOF / read deadline in the middle of a command


@pytest.mark.parametrize(
    ("data", "code", "text"),
    [
        (b"PUB t\n", "E_BAD_MESSAGE", "PUB failed to read message body size"),
        (b"PUB t\n\x00\x00", "E_BAD_MESSAGE", "PUB failed to read message body size"),
        (b"PUB t\n" + size(5) + b"ab", "E_BAD_MESSAGE", "PUB failed to read message body"),
        (b"DPUB t 1\n\x00", "E_BAD_MESSAGE", "DPUB failed to read message body size"),
        (b"DPUB t 1\n" + size(5), "E_BAD_MESSAGE", "DPUB failed to read message body"),
        (b"IDENTIFY\n", "E_BAD_BODY", "IDENTIFY failed to read body size"),
        (b"IDENTIFY\n" + size(5) + b"{", "E_BAD_BODY", "IDENTIFY failed to read body"),
        (b"AUTH\n\x00", "E_BAD_BODY", "AUTH failed to read body size"),
        (b"AUTH\n" + size(5), "E_BAD_BODY", "AUTH failed to read body"),
        (b"MPUB t\n", "E_BAD_BODY", "MPUB failed to read body size"),
        (b"MPUB t\n" + size(20), "E_BAD_BODY", "MPUB failed to read message count"),
        (b"MPUB t\n" + size(20) + b"\x00", "E_BAD_BODY", "MPUB failed to read message count"),
        (
            b"MPUB t\n" + size(20) + size(2),
            "E_BAD_MESSAGE",
            "MPUB failed to read message(0) body size",
        ),
        (
            b"MPUB t\n" + size(20) + size(2) + size(1) + b"a\x00",
            "E_BAD_MESSAGE",
            "MPUB failed to read message(1) body size",
        ),
        (
            b"MPUB t\n" + size(20) + size(2) + size(1) + b"a" + size(3) + b"b",
            "E_BAD_MESSAGE",
            "MPUB failed to read message body",
        ),
    ],
)
def test_eof_mid_body(data: bytes, code: str, text: str) -> None:
    for chunks in ([data], [bytes([b]) for b in data]):
        p = CommandParser()
        for c in chunks:
            p.feed(c)
            assert p.next_command() is None
        with pytest.raises(ProtocolError) as info:
            p.eof()
        assert (info.value.code, info.value.text, info.value.fatal) == (code, text, True)


def test_eof_between_commands_or_mid_line_is_silent() -> None:
    for data in (b"", b"NOP\n", b"FIN 01234", body_cmd(b"PUB t", b"x") + b"PU"):
        p = CommandParser()
        p.feed(data)
        while p.next_command() is not None:
            pass
        p.eof()


# --------------------------------------------------------------------------------------
# parse_uint: nsqd's ByteToBase10


def test_parse_uint() -> None:
    assert parse_uint(b"0") == 0
    assert parse_uint(b"2500") == 2500
    assert parse_uint(b"007") == 7
    assert parse_uint(b"") == 0  # ByteToBase10 of nothing is 0, no error
    for bad in (b"-1", b"+1", b"1.5", b" 1", b"1 ", b"0x10", b"\xd9\xa1", b"1e3"):
        assert parse_uint(bad) is None, bad
    # Wraps modulo 2**64 like Go's uint64 arithmetic, however long.
    assert parse_uint(b"18446744073709551615") == (1 << 64) - 1
    assert parse_uint(b"18446744073709551616") == 0
    assert parse_uint(b"18446744073709551617") == 1
    long = b"9" * 10_000  # more digits than int() accepts by default
    assert parse_uint(long) == (pow(10, 10_000, 1 << 64) - 1) % (1 << 64)  # == 2**64 - 1


# --------------------------------------------------------------------------------------
# Chunking independence

RNG_BODY = random.Random(7).randbytes(700)

STREAM = b"".join(
    [
        body_cmd(b"IDENTIFY", json.dumps({"client_id": "x", "heartbeat_interval": 1000}).encode()),
        body_cmd(b"AUTH", b"secret\nwith newline"),
        b"SUB topic channel#ephemeral\n",
        b"RDY 10\n",
        body_cmd(b"PUB topic", b"hello\r\nworld"),
        body_cmd(b"MPUB topic", mpub_body([b"m1", b"\n", RNG_BODY, b"last"])),
        body_cmd(b"DPUB topic 250", b"deferred"),
        b"FIN 0123456789abcdef\r\n",
        b"REQ 0123456789abcdef 1000\n",
        b"TOUCH 0123456789abcdef\n",
        b"NOP\n",
        body_cmd(b"PUB topic", RNG_BODY),
        b"RDY  \n",
        b"CLS\n",
    ]
)
EXPECTED = [
    Command(b"IDENTIFY", (), b'{"client_id": "x", "heartbeat_interval": 1000}'),
    Command(b"AUTH", (), b"secret\nwith newline"),
    Command(b"SUB", (b"topic", b"channel#ephemeral")),
    Command(b"RDY", (b"10",)),
    Command(b"PUB", (b"topic",), b"hello\r\nworld"),
    Command(b"MPUB", (b"topic",), [b"m1", b"\n", RNG_BODY, b"last"]),
    Command(b"DPUB", (b"topic", b"250"), b"deferred"),
    Command(b"FIN", (b"0123456789abcdef",)),
    Command(b"REQ", (b"0123456789abcdef", b"1000")),
    Command(b"TOUCH", (b"0123456789abcdef",)),
    Command(b"NOP", ()),
    Command(b"PUB", (b"topic",), RNG_BODY),
    Command(b"RDY", (b"", b"")),
    Command(b"CLS", ()),
]

# Streams that end in an error: (stream, commands before the error, expected error).
_GOOD = body_cmd(b"PUB t", b"ok") + b"NOP\n"
_GOOD_CMDS = [Command(b"PUB", (b"t",), b"ok"), Command(b"NOP", ())]
ERROR_STREAMS = [
    (_GOOD + b"PUB\n", ("E_INVALID", "PUB insufficient number of parameters", True)),
    (
        _GOOD + b"DPUB t 12x\n" + size(1) + b"x",
        ("E_INVALID", "DPUB could not parse timeout 12x", True),
    ),
    (
        _GOOD + b"MPUB b!d\n" + size(9),
        ("E_BAD_TOPIC", 'E_BAD_TOPIC MPUB topic name "b!d" is not valid', True),
    ),
    (
        _GOOD + b"PUB t\n" + size(0) + b"NOP\n",
        ("E_BAD_MESSAGE", "PUB invalid message body size 0", True),
    ),
    (
        _GOOD + b"MPUB t\n" + size(50) + size(2) + size(3) + b"abc" + size(-1) + b"x" * 20,
        ("E_BAD_MESSAGE", "MPUB invalid message(1) body size -1", True),
    ),
    (
        _GOOD + b"MPUB t\n" + size(50) + size(0) + b"NOP\n",
        ("E_BAD_BODY", "MPUB invalid message count 0", True),
    ),
    (_GOOD + b"IDENTIFY\n" + size(-1), ("E_BAD_BODY", "IDENTIFY invalid body size -1", True)),
    (_GOOD + b"AUTH a b\n", ("E_INVALID", "AUTH invalid number of parameters", True)),
]


def test_whole_stream() -> None:
    cmds, exc = run_whole(STREAM)
    assert exc is None
    assert cmds == EXPECTED


def test_stream_split_in_two_at_every_offset() -> None:
    for i in range(len(STREAM) + 1):
        cmds, exc = run([STREAM[:i], STREAM[i:]])
        assert exc is None, i
        assert cmds == EXPECTED, i


def test_stream_split_in_three_around_every_body() -> None:
    # Every pair of cut points within a window that crosses the MPUB header and messages.
    start = STREAM.index(b"MPUB")
    for i in range(start, start + 40):
        for j in range(i, start + 60):
            cmds, exc = run([STREAM[:i], STREAM[i:j], STREAM[j:]])
            assert exc is None and cmds == EXPECTED, (i, j)


def test_stream_byte_by_byte() -> None:
    cmds, exc = run([bytes([b]) for b in STREAM])
    assert exc is None
    assert cmds == EXPECTED


def test_stream_with_empty_feeds() -> None:
    chunks: list[bytes] = []
    for k in range(0, len(STREAM), 13):
        chunks += [b"", STREAM[k : k + 13], b""]
    cmds, exc = run(chunks)
    assert exc is None
    assert cmds == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_stream_random_chunking(data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(STREAM)), max_size=40), label="cut points"))
    bounds = [0, *cuts, len(STREAM)]
    chunks = [STREAM[a:b] for a, b in pairwise(bounds)]
    cmds, exc = run(chunks)
    assert exc is None
    assert cmds == EXPECTED


@pytest.mark.parametrize(("stream", "expected"), ERROR_STREAMS)
def test_error_stream_at_every_split(stream: bytes, expected: tuple[str, str, bool]) -> None:
    whole_cmds, whole_exc = run_whole(stream)
    assert whole_cmds == _GOOD_CMDS
    assert err_key(whole_exc) == expected
    for i in range(len(stream) + 1):
        cmds, exc = run([stream[:i], stream[i:]])
        assert (cmds, err_key(exc)) == (_GOOD_CMDS, expected), i
    cmds, exc = run([bytes([b]) for b in stream])
    assert (cmds, err_key(exc)) == (_GOOD_CMDS, expected)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(ERROR_STREAMS), st.data())
def test_error_stream_random_chunking(
    case: tuple[bytes, tuple[str, str, bool]], data: st.DataObject
) -> None:
    stream, expected = case
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in pairwise(bounds)]
    cmds, exc = run(chunks)
    assert (cmds, err_key(exc)) == (_GOOD_CMDS, expected)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.data())
def test_arbitrary_bytes_parse_the_same_whatever_the_chunking(
    blob: bytes, data: st.DataObject
) -> None:
    # Garbage in: whatever the outcome is, chunking must not change it, and nothing but a
    # ProtocolError may escape.
    stream = STREAM[:200] + blob
    whole = run_whole(stream, max_body_size=1000, max_msg_size=500)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in pairwise(bounds)]
    cmds, exc = run(chunks, max_body_size=1000, max_msg_size=500)
    assert (cmds, err_key(exc)) == (whole[0], err_key(whole[1]))


# -- framing: a parser given new_id_runs returns PUB, DPUB and MPUB bodies as message frames ------


@pytest.fixture(params=["python", "compiled"])
def parser_loop(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test with the parser's per-message loops in Python, then compiled
    (_speedups.c)."""
    compiled = request.param == "compiled"
    if compiled:
        _require_compiled()
    with parser_loops(compiled):
        yield str(request.param)


def _require_compiled() -> None:
    if parser_module.COMPILED_FRAME_MPUB is None or parser_module.COMPILED_SCAN_FINS is None:
        if os.environ.get("TRIONSQ_PURE_PYTHON"):
            pytest.skip("TRIONSQ_PURE_PYTHON is set: the compiled loops are not wanted")
        pytest.fail(
            "trionsq/protocol/_speedups.c is not built: install a C compiler and run "
            "scripts/setup-venv (or set TRIONSQ_PURE_PYTHON=1 to test without it)"
        )


@contextmanager
def parser_loops(compiled: bool) -> Iterator[None]:
    parser_module.use_compiled_loops(compiled)
    try:
        yield
    finally:
        parser_module.use_compiled_loops(not os.environ.get("TRIONSQ_PURE_PYTHON"))


class CountingIds:
    """`new_id_runs` for the parser: consecutive IDs (0, 1, 2, ... in hex), counting how many
    were taken, in runs of at most two (as when a clock tick's sequence runs out)."""

    def __init__(self) -> None:
        self.taken = 0

    def __call__(self, count: int) -> list[tuple[bytes, int, int]]:
        runs = []
        for n in range(self.taken, self.taken + count, 2):
            length = min(2, self.taken + count - n)
            runs.append((b"%013x" % (n >> 12), n & 0xFFF, (n & 0xFFF) + length))
        self.taken += count
        return runs


def _frame_parts(frame: bytes) -> tuple[int, int, int, bytes, bytes]:
    """(frame size, frame type, attempts, id, body) of a message frame."""
    frame_size, frame_type, _timestamp, attempts = struct.unpack_from(">IiqH", frame)
    return frame_size, frame_type, attempts, frame[18:34], frame[34:]


FRAMED_STREAM = (
    body_cmd(b"PUB t", b"one")
    + body_cmd(b"MPUB t", mpub_body([b"a", b"bb" * 40, b"c", b"dd" * 40]))
    + body_cmd(b"DPUB t 10", b"late")
    + b"NOP\n"
)


def test_framing_returns_frames_with_consecutive_ids_and_the_same_bodies(parser_loop: str) -> None:
    plain, err = run_whole(FRAMED_STREAM)
    assert err is None
    framed, err = run_whole(FRAMED_STREAM, new_id_runs=CountingIds())
    assert err is None
    assert [c.name for c in framed] == [c.name for c in plain]
    bodies = []
    ids = []
    for cmd in framed[:3]:
        assert isinstance(cmd.body, list)
        for frame in cmd.body:
            frame_size, frame_type, attempts, message_id, body = _frame_parts(frame)
            assert (frame_size, frame_type, attempts) == (len(frame) - 4, 2, 0)
            bodies.append(body)
            ids.append(message_id)
    assert bodies == [b"one", b"a", b"bb" * 40, b"c", b"dd" * 40, b"late"]
    assert ids == [b"%016x" % i for i in range(6)]


@pytest.mark.parametrize("split", range(1, len(FRAMED_STREAM)))
def test_framing_does_not_depend_on_how_the_stream_is_cut(split: int, parser_loop: str) -> None:
    whole, err = run_whole(FRAMED_STREAM, new_id_runs=CountingIds())
    cut, err_cut = run([FRAMED_STREAM[:split], FRAMED_STREAM[split:]], new_id_runs=CountingIds())
    assert err is None and err_cut is None
    # Equal but for the timestamps (bytes 8-16 of each frame).
    strip = [
        [f[:8] + f[16:] for f in c.body] if isinstance(c.body, list) else c.body for c in whole
    ]
    assert strip == [
        [f[:8] + f[16:] for f in c.body] if isinstance(c.body, list) else c.body for c in cut
    ]


def test_framing_takes_ids_a_block_at_a_time(parser_loop: str) -> None:
    """A client may declare a million messages and send a few: the parser takes IDs for a
    block, not for the count declared."""
    from trionsq.protocol.parser import ID_BLOCK

    ids = CountingIds()
    declared = 1_000_000
    partial = body_cmd(b"MPUB t", mpub_body([b"x"] * 3, count=declared))
    assert run_whole(partial, max_body_size=MAX_BODY, new_id_runs=ids) == ([], None)
    assert 0 < ids.taken <= ID_BLOCK


def test_framing_keeps_mpub_errors(parser_loop: str) -> None:
    data = body_cmd(b"MPUB t", mpub_body([b"ok", b""]))
    assert err_key(run_whole(data)[1]) == err_key(run_whole(data, new_id_runs=CountingIds())[1])
    big = body_cmd(b"MPUB t", mpub_body([b"x" * 11]))
    assert err_key(run_whole(big, max_msg_size=10)[1]) == err_key(
        run_whole(big, max_msg_size=10, new_id_runs=CountingIds())[1]
    )


def _strip_timestamps(commands: list[Command]) -> list[object]:
    return [[f[:8] + f[16:] for f in c.body] if isinstance(c.body, list) else c for c in commands]


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=-3, max_value=40), min_size=1, max_size=30),
    max_msg=st.integers(min_value=1, max_value=40),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=6),
    run_length=st.integers(min_value=1, max_value=5),
    first_id=st.integers(min_value=0, max_value=5000),
)
def test_the_compiled_parser_loop_matches_the_python_one(
    sizes: list[int], max_msg: int, cuts: list[int], run_length: int, first_id: int
) -> None:
    """Records of any size (invalid ones too), the stream cut anywhere, IDs in runs of any
    length from anywhere in a tick: the same frames, the same error, the same IDs taken."""
    _require_compiled()
    records = b"".join(size(n) + bytes([65 + i % 26]) * max(n, 0) for i, n in enumerate(sizes))
    data = body_cmd(b"MPUB t", size(len(sizes)) + records)
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in pairwise([0, *points, len(data)]) if b > a]

    def parse(compiled: bool) -> tuple[object, object, int]:
        ids = CountingIds()
        ids.taken = first_id

        def new_id_runs(count: int) -> list[tuple[bytes, int, int]]:
            runs = []
            for _ in range(count):
                runs += ids(1)
            # merge into runs of `run_length` where they are consecutive in one tick
            merged: list[tuple[bytes, int, int]] = []
            for high, start, end in runs:
                if (
                    merged
                    and merged[-1][0] == high
                    and merged[-1][2] == start
                    and merged[-1][2] - merged[-1][1] < run_length
                ):
                    merged[-1] = (high, merged[-1][1], end)
                else:
                    merged.append((high, start, end))
            return merged

        with parser_loops(compiled):
            commands, error = run(chunks, max_msg_size=max_msg, new_id_runs=new_id_runs)
        return _strip_timestamps(commands), err_key(error), ids.taken

    assert parse(compiled=True) == parse(compiled=False)


# -- take_fins: runs of FIN taken in one pass ---------------------------------------------


def _drain_taking_fins(chunks: list[bytes]) -> tuple[list[Command], ProtocolError | None]:
    """As `run`, but taking runs of FIN with `take_fins` first, as nsqd's command loop does;
    each FIN taken is expanded to the command `next_command` would have returned."""
    parser = CommandParser()
    out: list[Command] = []
    for chunk in chunks:
        parser.feed(chunk)
        try:
            while True:
                fins = parser.take_fins()
                if fins:
                    out += [Command(b"FIN", (i,), None) for i in fins]
                    continue
                cmd = parser.next_command()
                if cmd is None:
                    break
                out.append(cmd)
        except ProtocolError as exc:
            return out, exc
    return out, None


FIN_LINES = st.sampled_from(
    [
        b"FIN 0123456789abcdef\n",
        b"FIN 0123456789abcde\r\n",  # trailing \r stripped: a 15-byte ID
        b"FIN 0123456789abcdef\r\n",
        b"FIN 0123456 89abcdef\n",  # a space splits it
        b"FIN 0123456789abcdef \n",
        b"FIN \n",
        b"FIN 0123\n56789abcdef\n",
        b"NOP\n",
        b"RDY 1\n",
        b"FINISH 0123456789abcd\n",
    ]
)


@settings(max_examples=300)
@given(st.lists(FIN_LINES, max_size=12), st.randoms(use_true_random=False))
def test_take_fins_is_next_command_for_every_fin_it_takes(
    lines: list[bytes], rnd: random.Random
) -> None:
    data = b"".join(lines)
    cuts = sorted(rnd.sample(range(1, len(data)), min(3, max(len(data) - 1, 0)))) if data else []
    chunks = [data[a:b] for a, b in pairwise([0, *cuts, len(data)])]
    plain_cmds, plain_err = run(chunks)
    _require_compiled()
    for compiled in (False, True):
        with parser_loops(compiled):
            fin_cmds, fin_err = _drain_taking_fins(chunks)
        assert fin_cmds == plain_cmds
        assert err_key(fin_err) == err_key(plain_err)


def test_take_fins_takes_a_run_and_stops_at_anything_else(parser_loop: str) -> None:
    parser = CommandParser()
    parser.feed(b"FIN 0123456789abcdef\nFIN fedcba9876543210\nNOP\nFIN 0123456789abcdef\n")
    assert parser.take_fins() == [b"0123456789abcdef", b"fedcba9876543210"]
    assert parser.take_fins() == []
    assert parser.next_command() == Command(b"NOP", (), None)
    assert parser.take_fins() == [b"0123456789abcdef"]
    assert parser.next_command() is None
