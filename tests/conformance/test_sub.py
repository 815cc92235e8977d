"""SUB: success and its fatal errors (docs/protocol.md §1.3 SUB, §1.10 names)."""

from __future__ import annotations

import pytest

from .conftest import Connect


def test_sub_ok(connect: Connect, topic: str, channel: str) -> None:
    connect().sub(topic, channel)


def test_sub_after_identify_ok(connect: Connect, topic: str, channel: str) -> None:
    conn = connect(heartbeat_interval=1000, msg_timeout=2000)
    conn.sub(topic, channel)


def test_sub_twice_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    conn = connect()
    conn.sub(topic, channel)
    conn.send(b"SUB " + topic.encode() + b" other\n")
    conn.expect_fatal("E_INVALID", "cannot SUB in current state")


def test_sub_with_heartbeats_disabled_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    conn = connect(heartbeat_interval=-1)
    conn.send(b"SUB " + topic.encode() + b" " + channel.encode() + b"\n")
    conn.expect_fatal("E_INVALID", "cannot SUB with heartbeats disabled")


def test_sub_insufficient_params_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    conn.send(b"SUB " + topic.encode() + b"\n")
    conn.expect_fatal("E_INVALID", "SUB insufficient number of parameters")


@pytest.mark.parametrize("name", ["bad!topic", "a" * 65, "sp!", "x#ephemeral1"])
def test_sub_bad_topic_is_fatal(connect: Connect, channel: str, name: str) -> None:
    conn = connect()
    conn.send(b"SUB " + name.encode() + b" " + channel.encode() + b"\n")
    conn.expect_fatal("E_BAD_TOPIC", f'SUB topic name "{name}" is not valid')


@pytest.mark.parametrize("name", ["bad!channel", "c" * 65, "c#eph", "c/d"])
def test_sub_bad_channel_is_fatal(connect: Connect, topic: str, name: str) -> None:
    conn = connect()
    conn.send(b"SUB " + topic.encode() + b" " + name.encode() + b"\n")
    conn.expect_fatal("E_BAD_CHANNEL", f'SUB channel name "{name}" is not valid')


def test_sub_empty_channel_name_is_fatal(connect: Connect, topic: str) -> None:
    conn = connect()
    # "SUB t \n": three params, the channel empty (split is on every single space)
    conn.send(b"SUB " + topic.encode() + b" \n")
    conn.expect_fatal("E_BAD_CHANNEL", 'SUB channel name "" is not valid')


def test_sub_longest_valid_names(connect: Connect, topic: str) -> None:
    topic = topic + "t" * (64 - len(topic))
    channel = "c" * 54 + "#ephemeral"
    assert len(topic) == 64 and len(channel) == 64
    connect().sub(topic, channel)


def test_sub_after_cls_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    conn = connect()
    conn.sub(topic, channel)
    conn.cls()
    conn.expect_response(b"CLOSE_WAIT")
    conn.send(b"SUB " + topic.encode() + b" " + channel.encode() + b"\n")
    conn.expect_fatal("E_INVALID", "cannot SUB in current state")
