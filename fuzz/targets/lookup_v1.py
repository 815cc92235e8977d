"""nsqlookupd's V1 protocol (trionsq.protocol.lookup_v1): `LookupParser` fed arbitrary bytes in
arbitrary splits, IDENTIFY bodies through `decode_identify`, REGISTER/UNREGISTER parameters
through `topic_and_channel`.

What must hold:
* only `ProtocolError` (with an ``E_`` code) escapes;
* the commands and the error do not depend on the split;
* `buffered` never exceeds the bytes fed (no preallocation from IDENTIFY's declared size);
* every command re-encoded (its line, and ``[size][body]`` for IDENTIFY) parses back equal;
* a decoded IDENTIFY has every field Go's PeerInfo requires, ports in int64 range.
"""

from __future__ import annotations

import struct

from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.lookup_v1 import (
    LookupCommand,
    LookupParser,
    decode_identify,
    encode_lookup_response,
    topic_and_channel,
)

from ..common import check, drive_parser, split_input


def _parse(chunks: list[bytes]) -> tuple[list[LookupCommand], tuple[str, str] | None]:
    return drive_parser(LookupParser(), chunks)


def _encode(cmd: LookupCommand) -> bytes:
    line = " ".join((cmd.name, *cmd.params)).encode("utf-8", "surrogateescape") + b"\n"
    if cmd.body is None:
        return line
    return line + struct.pack(">i", len(cmd.body)) + cmd.body


def test_one_input(data: bytes) -> None:
    _, chunks = split_input(data)
    whole = b"".join(chunks)
    commands, error = _parse(chunks)
    check((commands, error) == _parse([whole] if whole else []), "result depends on the split")
    for cmd in commands:
        again, err = _parse([_encode(cmd)])
        check(err is None and again == [cmd], f"{cmd!r} re-encoded parses as {again!r} {err}")
        try:
            if cmd.name == "IDENTIFY":
                assert cmd.body is not None
                peer = decode_identify(cmd.body)
                check(bool(peer.broadcast_address and peer.tcp_port and peer.version), "fields")
                check(-(1 << 63) <= peer.http_port < (1 << 63), "port range")
            elif cmd.name in ("REGISTER", "UNREGISTER"):
                topic, _channel = topic_and_channel(cmd.name, cmd.params)
                check(bool(topic), "empty topic")
        except ProtocolError as err:
            check(err.code.startswith("E_"), f"error code {err.code!r}")
    check(encode_lookup_response(whole[:8])[4:] == whole[:8], "response encoding")


def seeds() -> list[bytes]:
    body = (
        b'{"broadcast_address":"127.0.0.1","tcp_port":4150,"http_port":4151,'
        b'"version":"1.3.0","hostname":"h"}'
    )
    stream = (
        b"PING\n"
        + b"IDENTIFY\n"
        + struct.pack(">i", len(body))
        + body
        + b"REGISTER topic channel\nREGISTER topic\nUNREGISTER topic chan#ephemeral\n"
        + b"UNREGISTER topic\n  PING  \r\n"
    )
    return [
        b"\x00" + stream,
        b"\x01" + stream,
        b"\x0b" + stream,
        b"\x00IDENTIFY\n\xff\xff\xff\xff",
        b"\x00IDENTIFY\n\x00\x00\x00\x04null",
        b'\x00IDENTIFY\n\x00\x00\x00\x1a{"TCP_port":1e3,"x":[1]}',
    ]
