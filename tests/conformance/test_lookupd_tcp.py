"""nsqlookupd's TCP protocol V1 on its own: magic, reply framing, PING, unknown commands,
IDENTIFY and the argument checks of REGISTER / UNREGISTER (docs/protocol.md §6.1; Go's
nsqlookupd/tcp.go and nsqlookupd/lookup_protocol_v1.go).

Every error nsqlookupd sends is a FatalClientErr: the ``[size]CODE text`` reply, then the
connection is closed (lookup_protocol_v1.go:53-61).
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
from typing import Any

import pytest

from .conftest import LookupdAddresses, LookupdConnect, NewTopic
from .lookupd_conn import peer_info

# -- magic and framing --------------------------------------------------------------------


@pytest.mark.parametrize("magic", [b"  V2", b"  V0", b"  v1", b"V1  ", b"XXXX", b"PING"])
def test_wrong_magic_is_E_BAD_PROTOCOL_then_close(
    lookupd_connect: LookupdConnect, magic: bytes
) -> None:
    """tcp.go:38-43: ``[size]E_BAD_PROTOCOL`` (length-prefixed, no frame type, no text)."""
    conn = lookupd_connect(magic=magic)
    assert conn.read_raw(18) == struct.pack(">i", 14) + b"E_BAD_PROTOCOL"
    conn.expect_closed()


def test_magic_split_across_writes(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect(magic=None)
    for part in (b" ", b" V", b"1"):
        conn.send(part)
        time.sleep(0.02)
    conn.ping()


def test_ping_reply_is_length_prefixed_ok(lookupd_connect: LookupdConnect) -> None:
    """Replies are ``[4-byte size][data]`` with no frame type (unlike nsqd's V2)."""
    conn = lookupd_connect()
    conn.send(b"PING\n")
    assert conn.read_raw(6) == b"\x00\x00\x00\x02OK"
    conn.expect_nothing(0.1)


def test_ping_before_identify_is_ok(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    conn.ping()
    conn.ping()


@pytest.mark.parametrize(
    "line",
    [b"PING\r\n", b"  PING\n", b"PING \t \n", b"\tPING\r\n", b"PING extra words\n"],
)
def test_lines_are_trimmed_and_extra_params_ignored(
    lookupd_connect: LookupdConnect, line: bytes
) -> None:
    """strings.TrimSpace on the line, then split on single spaces (v1.go:41-42)."""
    conn = lookupd_connect()
    conn.send(line)
    conn.expect_response(b"OK")
    conn.ping()


def test_pipelined_commands_are_answered_in_order(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    conn.send(b"PING\n" * 5 + b"BOGUS\n" + b"PING\n")
    for _ in range(5):
        conn.expect_response(b"OK")
    conn.expect_fatal("E_INVALID", "invalid command BOGUS")


def test_commands_split_across_writes(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    for byte in b"PING\n":
        conn.send(bytes([byte]))
        time.sleep(0.005)
    conn.expect_response(b"OK")


def test_unterminated_line_at_eof_is_not_executed(lookupd_connect: LookupdConnect) -> None:
    """ReadString('\\n') failing at EOF ends the loop before the partial line is run."""
    conn = lookupd_connect()
    conn.send(b"PING\nPING")
    conn.shutdown_write()
    conn.expect_response(b"OK")
    conn.expect_closed()


# -- unknown commands ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "name"),
    [
        (b"FOO bar", "FOO"),
        (b"ping", "ping"),
        (b"NOP", "NOP"),
        (b"PUB topic", "PUB"),
        (b"SUB topic channel", "SUB"),
        (b"IDENTIFYX", "IDENTIFYX"),
        (b"REGISTER\ttopic", "REGISTER\ttopic"),
    ],
)
def test_unknown_command_is_fatal(lookupd_connect: LookupdConnect, line: bytes, name: str) -> None:
    conn = lookupd_connect()
    conn.send(line + b"\n")
    conn.expect_fatal("E_INVALID", f"invalid command {name}")


@pytest.mark.parametrize("line", [b"\n", b"   \r\n", b"\t\n"])
def test_empty_line_is_an_invalid_empty_command(
    lookupd_connect: LookupdConnect, line: bytes
) -> None:
    """An empty line splits to ``[""]``: ``E_INVALID invalid command `` (trailing space)."""
    conn = lookupd_connect()
    conn.send(line)
    conn.expect_fatal("E_INVALID", "invalid command ")


def test_unknown_command_after_identify_is_fatal(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.send(b"DELETE topic\n")
    conn.expect_fatal("E_INVALID", "invalid command DELETE")


# -- REGISTER / UNREGISTER before IDENTIFY ------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"REGISTER topic",
        b"REGISTER topic channel",
        b"REGISTER",
        b"REGISTER bad!topic",
        b"UNREGISTER topic",
        b"UNREGISTER topic channel",
        b"UNREGISTER",
    ],
)
def test_register_before_identify_is_fatal(lookupd_connect: LookupdConnect, line: bytes) -> None:
    """Checked before the parameters (v1.go:126-128, 152-154)."""
    conn = lookupd_connect()
    conn.send(line + b"\n")
    conn.expect_fatal("E_INVALID", "client must IDENTIFY")


def test_ping_then_register_still_needs_identify(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    conn.ping()
    conn.send(b"REGISTER topic\n")
    conn.expect_fatal("E_INVALID", "client must IDENTIFY")


# -- IDENTIFY -----------------------------------------------------------------------------

IDENTIFY_REPLY_FIELDS = {
    "tcp_port": int,
    "http_port": int,
    "version": str,
    "broadcast_address": str,
    "hostname": str,
}


def test_identify_reply_describes_the_lookupd(
    lookupd_connect: LookupdConnect, lookupd_addresses: LookupdAddresses
) -> None:
    """v1.go:243-260: the lookupd's own listening ports, version, broadcast address and
    OS hostname."""
    conn = lookupd_connect()
    reply = conn.identify_as(peer_info())
    assert set(reply) == set(IDENTIFY_REPLY_FIELDS), sorted(reply)
    for name, kind in IDENTIFY_REPLY_FIELDS.items():
        assert type(reply[name]) is kind, (name, reply[name])
    assert lookupd_addresses.tcp is not None
    assert reply["tcp_port"] == lookupd_addresses.tcp[1]
    if lookupd_addresses.http is not None:
        assert reply["http_port"] == lookupd_addresses.http[1]
    assert re.fullmatch(r"\d+\.\d+\.\d+(-\S+)?", reply["version"]), reply["version"]
    assert reply["broadcast_address"] and reply["hostname"]
    if lookupd_addresses.started_here:
        assert reply["broadcast_address"] == "127.0.0.1"
        assert reply["hostname"] == socket.gethostname()


def test_identify_reply_is_compact_json_with_sorted_keys(
    lookupd_connect: LookupdConnect,
) -> None:
    """Go's json.Marshal of a map: keys sorted, no spaces, no trailing newline."""
    conn = lookupd_connect()
    reply = conn.identify_as(peer_info())
    assert conn.last_json_raw == json.dumps(reply, separators=(",", ":"), sort_keys=True).encode()


def test_identify_then_ping_and_register(
    lookupd_connect: LookupdConnect, new_topic: NewTopic
) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.ping()
    conn.register(new_topic())


def test_identify_body_split_across_writes(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    body = json.dumps(peer_info()).encode()
    data = b"IDENTIFY\n" + struct.pack(">i", len(body)) + body
    for chunk in (data[:5], data[5:11], data[11:20], data[20:]):
        conn.send(chunk)
        time.sleep(0.02)
    assert "tcp_port" in conn.expect_json()
    conn.ping()


def test_identify_body_has_no_size_limit(lookupd_connect: LookupdConnect) -> None:
    """Go reads whatever size the client announces (v1.go:207-217)."""
    conn = lookupd_connect()
    conn.send_identify(_body(padding="x" * 2_000_000))
    assert set(conn.expect_json(timeout=15)) == set(IDENTIFY_REPLY_FIELDS)
    conn.ping()


def test_identify_twice_is_fatal(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.send_identify(peer_info())
    conn.expect_fatal("E_INVALID", "cannot IDENTIFY again")


def test_identify_again_is_refused_before_the_body_is_read(
    lookupd_connect: LookupdConnect,
) -> None:
    """v1.go:203-205 checks before reading the body size: the error comes at once."""
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.send(b"IDENTIFY\n")
    conn.expect_fatal("E_INVALID", "cannot IDENTIFY again")


@pytest.mark.parametrize("partial", [b"", b"\x00", b"\x00\x00\x00"])
def test_identify_truncated_body_size(lookupd_connect: LookupdConnect, partial: bytes) -> None:
    conn = lookupd_connect()
    conn.send(b"IDENTIFY\n" + partial)
    conn.shutdown_write()
    conn.expect_fatal("E_BAD_BODY", "IDENTIFY failed to read body size")


@pytest.mark.parametrize(("size", "sent"), [(10, b""), (100, b'{"version":"1.3.0"')])
def test_identify_truncated_body(lookupd_connect: LookupdConnect, size: int, sent: bytes) -> None:
    conn = lookupd_connect()
    conn.send(b"IDENTIFY\n" + struct.pack(">i", size) + sent)
    conn.shutdown_write()
    conn.expect_fatal("E_BAD_BODY", "IDENTIFY failed to read body")


def _body(**changes: Any) -> bytes:
    """A complete IDENTIFY body with some fields changed (a value of ... removes one)."""
    info = peer_info()
    for name, value in changes.items():
        if value is ...:
            info.pop(name, None)
        else:
            info[name] = value
    return json.dumps(info).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"{",
        b"[]",
        b"123",
        b'"text"',
        b"true",
        _body() + b" trailing",
        _body(tcp_port="4150"),
        _body(tcp_port=1.5),
        _body(tcp_port=4150.0),
        _body(tcp_port=2**64),
        _body(http_port=True),
        _body(http_port=[4151]),
        _body(version=130),
        _body(broadcast_address={"ip": "127.0.0.1"}),
        _body(hostname=5),
    ],
    ids=lambda b: b[:40].decode(errors="replace") or "empty",
)
def test_identify_undecodable_body(lookupd_connect: LookupdConnect, body: bytes) -> None:
    """Go's json.Unmarshal into PeerInfo fails on bad JSON and on a value of the wrong
    type for a field (ints must be integer literals that fit an int)."""
    conn = lookupd_connect()
    conn.send_identify(body)
    conn.expect_fatal("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b"null",
        _body(broadcast_address=...),
        _body(tcp_port=...),
        _body(http_port=...),
        _body(version=...),
        _body(broadcast_address=""),
        _body(tcp_port=0),
        _body(http_port=0),
        _body(version=""),
        _body(broadcast_address=None),
        _body(tcp_port=None),
        _body(version=None),
    ],
    ids=lambda b: b[:60].decode(errors="replace"),
)
def test_identify_missing_fields(lookupd_connect: LookupdConnect, body: bytes) -> None:
    """v1.go:228-231: broadcast_address, tcp_port, http_port and version must be non-zero
    (a JSON null leaves a Go field at its zero value, so it counts as missing)."""
    conn = lookupd_connect()
    conn.send_identify(body)
    conn.expect_fatal("E_BAD_BODY", "IDENTIFY missing fields")


@pytest.mark.parametrize(
    "body",
    [
        _body(hostname=...),
        _body(hostname=""),
        _body(unknown_field={"nested": [1, 2]}, client_id="x"),
        _body(topology_zone="zone-a", topology_region="region-1"),
        _body() + b" \n\t",
        json.dumps(
            {
                "Broadcast_Address": "conf-case.invalid",
                "TCP_PORT": 4150,
                "Http_Port": 4151,
                "VERSION": "1.3.0",
            }
        ).encode(),
    ],
    ids=["no-hostname", "empty-hostname", "unknown-fields", "topology", "whitespace", "case"],
)
def test_identify_accepted_bodies(
    lookupd_connect: LookupdConnect, new_topic: NewTopic, body: bytes
) -> None:
    """hostname is optional, unknown keys are ignored and, as in Go's encoding/json, keys
    match field names case-insensitively."""
    conn = lookupd_connect()
    conn.send_identify(body)
    assert set(conn.expect_json()) == set(IDENTIFY_REPLY_FIELDS)
    conn.register(new_topic())


# -- REGISTER / UNREGISTER arguments ------------------------------------------------------


@pytest.mark.parametrize("command", ["REGISTER", "UNREGISTER"])
@pytest.mark.parametrize("tail", [b"", b" ", b"   \r"])
def test_register_without_params(
    lookupd_connect: LookupdConnect, command: str, tail: bytes
) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.send(command.encode() + tail + b"\n")
    conn.expect_fatal("E_INVALID", f"{command} insufficient number of params")


BAD_NAMES = [
    "bad!name",
    "a" * 65,
    "#ephemeral",
    "name#ephemeral#ephemeral",
    "name#eph",
    "tópico",
    "a,b",
    "a/b",
    "a:b",
    "*",
]


@pytest.mark.parametrize("command", ["REGISTER", "UNREGISTER"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_register_bad_topic_name(lookupd_connect: LookupdConnect, command: str, name: str) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.command(command, name, "channel")
    conn.expect_fatal("E_BAD_TOPIC", f"{command} topic name '{name}' is not valid")


@pytest.mark.parametrize("command", ["REGISTER", "UNREGISTER"])
def test_register_empty_topic_name(lookupd_connect: LookupdConnect, command: str) -> None:
    """Two spaces split into an empty first parameter."""
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.send(command.encode() + b"  topic\n")
    conn.expect_fatal("E_BAD_TOPIC", f"{command} topic name '' is not valid")


@pytest.mark.parametrize("command", ["REGISTER", "UNREGISTER"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_register_bad_channel_name(
    lookupd_connect: LookupdConnect, new_topic: NewTopic, command: str, name: str
) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.command(command, new_topic(), name)
    conn.expect_fatal("E_BAD_CHANNEL", f"{command} channel name '{name}' is not valid")


def test_topic_is_checked_before_channel(lookupd_connect: LookupdConnect) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.send(b"REGISTER bad!topic bad!channel\n")
    conn.expect_fatal("E_BAD_TOPIC", "REGISTER topic name 'bad!topic' is not valid")


@pytest.mark.parametrize(
    ("topic_suffix", "channel"),
    [
        ("", None),
        ("", "channel"),
        ("#ephemeral", None),
        ("", "channel#ephemeral"),
        ("#ephemeral", "channel#ephemeral"),
        ("", "." * 64),
        ("", "a-b_c.D-9"),
    ],
)
def test_register_and_unregister_valid_names(
    lookupd_connect: LookupdConnect,
    new_topic: NewTopic,
    topic_suffix: str,
    channel: str | None,
) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    topic = new_topic(topic_suffix)
    conn.register(topic, channel)
    conn.register(topic, channel)
    conn.unregister(topic, channel)
    conn.unregister(topic, channel)
    conn.ping()


def test_longest_topic_name(lookupd_connect: LookupdConnect, new_topic: NewTopic) -> None:
    topic = new_topic("x" * 24)
    assert len(topic) == 64
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.register(topic)
    conn.unregister(topic)
    conn.send(f"REGISTER {topic}x\n".encode())
    conn.expect_fatal("E_BAD_TOPIC", f"REGISTER topic name '{topic}x' is not valid")


def test_register_extra_params_are_ignored(
    lookupd_connect: LookupdConnect, new_topic: NewTopic
) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    topic = new_topic()
    conn.send(f"REGISTER {topic} channel extra!!! more\n".encode())
    conn.expect_response(b"OK")
    conn.send(f"UNREGISTER {topic} channel extra!!!\n".encode())
    conn.expect_response(b"OK")


def test_unregister_what_was_never_registered(
    lookupd_connect: LookupdConnect, new_topic: NewTopic
) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    conn.unregister(new_topic())
    conn.unregister(new_topic(), "channel")
    conn.unregister(new_topic("#ephemeral"), "channel#ephemeral")


def test_pipelined_registrations(lookupd_connect: LookupdConnect, new_topic: NewTopic) -> None:
    conn = lookupd_connect()
    conn.identify_as(peer_info())
    topic = new_topic()
    conn.send(
        f"REGISTER {topic}\nPING\nREGISTER {topic} c1\nUNREGISTER {topic} c1\n"
        f"UNREGISTER {topic}\n".encode()
    )
    for _ in range(5):
        conn.expect_response(b"OK")
    conn.expect_nothing(0.1)
