"""Connection start, command framing, unknown commands and NOP (docs/protocol.md §1.1-§1.3)."""

from __future__ import annotations

import struct

import pytest

from .conftest import Connect


@pytest.mark.parametrize("magic", [b"  V1", b"  V3", b"XXXX", b"PUB "])
def test_wrong_magic_is_E_BAD_PROTOCOL_then_close(connect: Connect, magic: bytes) -> None:
    conn = connect(magic=magic)
    # The error frame body is exactly the code, with no text (§1.1).
    assert conn.expect_error("E_BAD_PROTOCOL") == ""
    conn.expect_closed()


def test_magic_alone_then_commands_work(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.pub(topic, b"hello")


def test_unknown_command_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.send(b"FOO bar\n")
    conn.expect_fatal("E_INVALID", "invalid command FOO")


def test_command_names_are_case_sensitive(connect: Connect) -> None:
    conn = connect()
    conn.send(b"nop\n")
    conn.expect_fatal("E_INVALID", "invalid command nop")


def test_nop_has_no_response(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.nop()
    conn.expect_nothing(0.3)
    # the connection is still usable and replies stay in order
    conn.nop()
    conn.pub(topic, b"after nop")


def test_trailing_carriage_return_is_stripped(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.send(b"PUB " + topic.encode() + b"\r\n" + struct.pack(">i", 3) + b"abc")
    conn.expect_response(b"OK")
    conn.send(b"NOP\r\n")
    conn.expect_nothing(0.2)


def test_pipelined_commands_are_answered_in_order(connect: Connect, topic: str) -> None:
    conn = connect()
    cmds = b"".join(
        b"PUB " + topic.encode() + b"\n" + struct.pack(">i", 1) + b"x" for _ in range(10)
    )
    conn.send(cmds + b"NOP\n" + b"BOGUS\n")
    for _ in range(10):
        conn.expect_response(b"OK")
    conn.expect_fatal("E_INVALID", "invalid command BOGUS")


def test_commands_split_across_writes(connect: Connect, topic: str) -> None:
    conn = connect()
    data = b"PUB " + topic.encode() + b"\n" + struct.pack(">i", 5) + b"hello"
    for i in range(len(data)):
        conn.send(data[i : i + 1])
    conn.expect_response(b"OK")


def test_pub_needs_no_identify(connect: Connect, topic: str, channel: str) -> None:
    producer = connect()
    producer.pub(topic, b"plain")
    consumer = connect()
    consumer.sub(topic, channel)
    consumer.rdy(1)
    assert consumer.read_message().body == b"plain"
