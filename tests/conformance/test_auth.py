"""AUTH on an nsqd without an auth server (the default; docs/protocol.md §1.3 AUTH)."""

from __future__ import annotations

import struct

from .conftest import Connect


def test_identify_reports_auth_not_required(connect: Connect) -> None:
    assert connect().negotiate()["auth_required"] is False


def test_auth_is_disabled(connect: Connect) -> None:
    conn = connect()
    conn.auth(b"secret")
    conn.expect_fatal("E_AUTH_DISABLED", "AUTH disabled")


def test_auth_after_identify_is_disabled(connect: Connect) -> None:
    conn = connect()
    conn.negotiate()
    conn.auth(b"secret")
    conn.expect_fatal("E_AUTH_DISABLED", "AUTH disabled")


def test_auth_with_params_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.send(b"AUTH extra\n")
    conn.expect_fatal("E_INVALID", "AUTH invalid number of parameters")


def test_auth_invalid_body_size_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.send(b"AUTH\n" + struct.pack(">i", 0))
    conn.expect_fatal("E_BAD_BODY", "AUTH invalid body size 0")


def test_auth_body_too_big_is_fatal(connect: Connect) -> None:
    conn = connect()
    conn.send(b"AUTH\n" + struct.pack(">i", 5_242_881))
    conn.expect_fatal("E_BAD_BODY", "AUTH body too big 5242881 > 5242880")


def test_auth_after_sub_is_fatal(connect: Connect, topic: str, channel: str) -> None:
    conn = connect()
    conn.sub(topic, channel)
    conn.auth(b"secret")
    conn.expect_fatal("E_INVALID", "cannot AUTH in current state")
