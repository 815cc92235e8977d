"""TLS, snappy and deflate negotiated by IDENTIFY (docs/protocol.md §1.3), --tls-required, client
certificate policies and HTTPS, against an in-process nsqd over real TCP connections, with a
trustme CA.

The client here upgrades as go-nsq does: IDENTIFY with feature_negotiation, read the JSON reply
in plaintext, then for each granted feature (TLS, then snappy or deflate) wrap the connection
and read the OK that nsqd sends over the new layer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import ssl
import struct
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme

from tests.nsqd_harness import Conn, run_inline, start_nsqd
from trionsq.apps.bench.reader import parse_batch
from trionsq.apps.bench.transports import TRANSPORTS, TransportSpec, subscribe_with
from trionsq.daemon import StartupError
from trionsq.net.transport import DeflateStream, SnappyStream
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.options import NSQDOptions
from trionsq.nsqd.stats import snapshot
from trionsq.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    decode_message,
    fin,
    identify,
    mpub,
    nop,
    pub,
    rdy,
    sub,
)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


class Certs:
    def __init__(self, ca: trustme.CA, directory: Path) -> None:
        self.ca = ca
        self.ca_file = str(directory / "ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        self.server = str(directory / "server.pem")
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(self.server)
        self.client_cert = ca.issue_cert("client.example", common_name="client.example")

    def nsqd_options(self, **overrides: Any) -> dict[str, Any]:
        options: dict[str, Any] = {
            "tls_cert": self.server,
            "tls_key": self.server,
            "https_address": "127.0.0.1:0",
        }
        options.update(overrides)
        return options

    def client_context(self, with_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if with_cert:
            self.client_cert.configure_cert(context)
        return context


@pytest.fixture
def certs(ca: trustme.CA, tmp_path: Path) -> Certs:
    (tmp_path / "certs").mkdir()
    return Certs(ca, tmp_path / "certs")


class Client:
    """A V2 client over TCP that upgrades as go-nsq does."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buf = b""

    @classmethod
    async def connect(cls, nsqd: NSQD) -> Client:
        assert isinstance(nsqd.tcp_address, tuple)
        stream = await trio.open_tcp_stream(*nsqd.tcp_address)
        await stream.send_all(MAGIC_V2)
        return cls(stream)

    @classmethod
    async def upgraded(
        cls,
        nsqd: NSQD,
        context: ssl.SSLContext | None = None,
        *,
        snappy: bool = False,
        deflate: bool = False,
        deflate_level: int = 0,
        **fields: Any,
    ) -> tuple[Client, dict[str, Any]]:
        """Connect, IDENTIFY asking for TLS (with `context`), snappy or deflate, and upgrade
        to what nsqd grants; returns the client and nsqd's JSON reply. A failed upgrade closes
        the connection and raises."""
        client = await cls.connect(nsqd)
        fields.update(
            feature_negotiation=True, tls_v1=context is not None, snappy=snappy, deflate=deflate
        )
        if deflate_level:
            fields["deflate_level"] = deflate_level
        await client.send(identify(fields))
        reply = json.loads(await client.response())
        try:
            await client.upgrade(reply, context)
        except BaseException:
            await client.aclose()
            raise
        return client, reply

    async def upgrade(self, reply: dict[str, Any], context: ssl.SSLContext | None) -> None:
        if reply["tls_v1"]:
            assert context is not None
            assert not self.buf, "nothing may follow the JSON reply before the handshake"
            tls = trio.SSLStream(self.stream, context, server_hostname="127.0.0.1")
            await tls.do_handshake()
            self.stream = tls
            assert await self.response() == b"OK"
        if reply["snappy"] or reply["deflate"]:
            # What was read past the last plaintext frame is already compressed.
            below: trio.abc.Stream = _Prefixed(self.stream, self.buf)
            self.buf = b""
            if reply["snappy"]:
                self.stream = SnappyStream(below)
            else:
                self.stream = DeflateStream(below, reply["deflate_level"])
            assert await self.response() == b"OK"

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def frame(self) -> tuple[int, bytes]:
        """The next frame other than a heartbeat; EOFError when nsqd closed."""
        while True:
            if len(self.buf) >= 8:
                size, frame_type = struct.unpack_from(">ii", self.buf)
                if len(self.buf) >= 4 + size:
                    data, self.buf = self.buf[8 : 4 + size], self.buf[4 + size :]
                    if (frame_type, data) == (FRAME_TYPE_RESPONSE, HEARTBEAT):
                        await self.send(nop())
                        continue
                    return frame_type, data
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("connection closed")
            self.buf += data

    async def response(self) -> bytes:
        frame_type, data = await self.frame()
        assert frame_type == FRAME_TYPE_RESPONSE, (frame_type, data)
        return data

    async def error(self) -> bytes:
        frame_type, data = await self.frame()
        assert frame_type == FRAME_TYPE_ERROR, (frame_type, data)
        return data

    async def closed(self) -> bool:
        with trio.fail_after(5):
            try:
                while True:
                    await self.frame()
            except (EOFError, trio.BrokenResourceError):
                return True

    async def pub_sub_round_trip(self, topic: str, count: int = 3, size: int = 100) -> None:
        """Publish `count` messages, subscribe, receive and finish them all, over this
        connection's layers."""
        bodies = [os.urandom(size // 2) + b"%d" % i + b"z" * (size // 2) for i in range(count)]
        await self.send(pub(topic, bodies[0]) + mpub(topic, bodies[1:]) + sub(topic, "ch"))
        assert [await self.response() for _ in range(3)] == [b"OK"] * 3
        await self.send(rdy(count))
        received = []
        while len(received) < count:
            frame_type, data = await self.frame()
            assert frame_type == FRAME_TYPE_MESSAGE, (frame_type, data)
            message = decode_message(data)
            received.append(message.body)
            await self.send(fin(message.id))
        assert received == bodies

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


class _Prefixed(trio.abc.Stream):
    """A stream that first returns bytes already read from the stream beneath."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.transport_stream = stream
        self.prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.prefix:
            data, self.prefix = self.prefix, b""
            return data
        return bytes(await self.transport_stream.receive_some(max_bytes))

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


async def _client_stats(nsqd: NSQD) -> list[dict[str, Any]]:
    clients = []
    for topic in snapshot(nsqd)["topics"]:
        for channel in topic["channels"]:
            clients += channel["clients"]
    return clients


# -- upgrades -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tls", "snappy", "deflate"),
    [
        (True, False, False),
        (True, True, False),
        (True, False, True),
        (False, True, False),
        (False, False, True),
    ],
    ids=["tls", "tls+snappy", "tls+deflate", "snappy", "deflate"],
)
async def test_upgrade_then_publish_and_consume(nursery, tmp_path, certs, tls, snappy, deflate):
    nsqd = await start_nsqd(nursery, str(tmp_path), **certs.nsqd_options())
    context = certs.client_context() if tls else None
    client, reply = await Client.upgraded(nsqd, context, snappy=snappy, deflate=deflate)
    assert (reply["tls_v1"], reply["snappy"], reply["deflate"]) == (tls, snappy, deflate)
    await client.pub_sub_round_trip("t", count=500, size=300)  # flushes beyond 64 KiB
    (stats,) = await _client_stats(nsqd)
    assert (stats["tls"], stats["snappy"], stats["deflate"]) == (tls, snappy, deflate)
    if tls:
        assert stats["tls_version"] in ("TLS1.2", "TLS1.3")
        assert stats["tls_cipher_suite"]
        assert stats["tls_negotiated_protocol_is_mutual"] is True
    else:
        assert stats["tls_version"] == ""
    await client.aclose()


@pytest.mark.parametrize(
    ("requested", "max_level", "level"),
    [(0, 6, 6), (1, 6, 1), (9, 6, 6), (9, 9, 9), (-3, 9, 6), (4, 2, 2)],
)
async def test_deflate_levels(nursery, tmp_path, requested, max_level, level):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_deflate_level=max_level)
    client, reply = await Client.upgraded(nsqd, deflate=True, deflate_level=requested)
    assert (reply["deflate"], reply["deflate_level"], reply["max_deflate_level"]) == (
        True,
        level,
        max_level,
    )
    channel_client = next(iter(nsqd.clients.values()))
    assert isinstance(channel_client.stream, DeflateStream)
    assert channel_client.stream.level == level
    await client.pub_sub_round_trip("t")


async def test_features_switched_off_are_not_granted(nursery, tmp_path, certs):
    nsqd = await start_nsqd(nursery, str(tmp_path), snappy=False, deflate=False)
    for feature in ("snappy", "deflate"):
        client, reply = await Client.upgraded(nsqd, **{feature: True})
        assert reply[feature] is False
        await client.pub_sub_round_trip(f"t_{feature}")  # still plaintext
    # No certificate: TLS is not offered either.
    client, reply = await Client.upgraded(nsqd, certs.client_context())
    assert reply["tls_v1"] is False
    await client.pub_sub_round_trip("t_tls")


async def test_snappy_and_deflate_together_is_fatal(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    client = await Client.connect(nsqd)
    await client.send(identify({"feature_negotiation": True, "snappy": True, "deflate": True}))
    assert await client.error() == (
        b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    )
    assert await client.closed()


async def test_without_feature_negotiation_nothing_is_upgraded(nursery, tmp_path, certs):
    nsqd = await start_nsqd(nursery, str(tmp_path), **certs.nsqd_options())
    client = await Client.connect(nsqd)
    await client.send(identify({"tls_v1": True, "snappy": True}))
    assert await client.response() == b"OK"
    await client.pub_sub_round_trip("t")


async def test_commands_pipelined_after_the_identify_are_dropped(nursery, tmp_path):
    """As Go replaces its bufio reader: bytes read past IDENTIFY in plaintext are lost."""
    nsqd = await start_nsqd(nursery, str(tmp_path))
    client = await Client.connect(nsqd)
    await client.send(identify({"feature_negotiation": True, "snappy": True}) + pub("lost", b"x"))
    reply = json.loads(await client.response())
    await client.upgrade(reply, None)
    await client.send(nop() + pub("kept", b"y"))
    assert await client.response() == b"OK"
    assert "lost" not in nsqd.topics and "kept" in nsqd.topics


async def test_commands_before_the_identify_are_answered_first(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    client = await Client.connect(nsqd)
    await client.send(pub("first", b"x") + identify({"feature_negotiation": True, "snappy": True}))
    assert await client.response() == b"OK"
    reply = json.loads(await client.response())
    await client.upgrade(reply, None)
    await client.pub_sub_round_trip("t")


# -- TLS failures and client certificates ---------------------------------------------------


async def test_a_client_that_does_not_trust_the_server_fails_and_others_go_on(
    nursery, tmp_path, certs, caplog
):
    caplog.set_level(logging.INFO, "trionsq.nsqd")
    nsqd = await start_nsqd(nursery, str(tmp_path), **certs.nsqd_options())
    wrong = ssl.create_default_context()
    trustme.CA().configure_trust(wrong)
    with pytest.raises(trio.BrokenResourceError):
        await Client.upgraded(nsqd, wrong)
    with trio.fail_after(5):
        while not any("IDENTIFY failed" in r.getMessage() for r in caplog.records):
            await trio.sleep(0.01)
    client, _ = await Client.upgraded(nsqd, certs.client_context())
    await client.pub_sub_round_trip("t")


async def test_a_client_that_never_handshakes_is_cut_off_after_5_seconds(
    nursery, tmp_path, certs, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path), **certs.nsqd_options(https_address=""))
    conn = await Conn.open(nsqd)
    await conn.send(identify({"feature_negotiation": True, "tls_v1": True}))
    assert json.loads(await conn.response())["tls_v1"] is True
    start = trio.current_time()
    # Go answers the failure over the connection as it is: in plaintext.
    assert await conn.error() == b"E_IDENTIFY_FAILED IDENTIFY failed i/o timeout"
    assert 5 <= trio.current_time() - start < 5.1
    assert await conn.closed()
    assert not nsqd.clients


async def test_plaintext_where_a_handshake_is_expected_fails_cleanly(nursery, tmp_path, certs):
    nsqd = await start_nsqd(nursery, str(tmp_path), **certs.nsqd_options())
    client = await Client.connect(nsqd)
    await client.send(identify({"feature_negotiation": True, "tls_v1": True}))
    assert json.loads(await client.response())["tls_v1"] is True
    await client.send(pub("t", b"not a ClientHello") + b"\n" * 300)
    frame_type, data = await client.frame()
    assert frame_type == FRAME_TYPE_ERROR
    assert data.startswith(b"E_IDENTIFY_FAILED IDENTIFY failed ")
    assert await client.closed()
    other, _ = await Client.upgraded(nsqd, certs.client_context())
    await other.pub_sub_round_trip("t")


@pytest.mark.parametrize("policy", ["require-verify", "require"])
async def test_client_certificate_required(nursery, tmp_path, certs, policy):
    nsqd = await start_nsqd(
        nursery,
        str(tmp_path),
        **certs.nsqd_options(tls_client_auth_policy=policy, tls_root_ca_file=certs.ca_file),
    )
    # Without a certificate: the handshake fails (with TLS 1.3 the client learns it at its
    # first read).
    with pytest.raises(trio.BrokenResourceError):
        client, _ = await Client.upgraded(nsqd, certs.client_context())
        await client.frame()
    # With one the CA issued: accepted.
    client, reply = await Client.upgraded(nsqd, certs.client_context(with_cert=True))
    assert reply["tls_v1"] is True
    await client.pub_sub_round_trip("t")
    tls = next(iter(nsqd.clients.values())).tls
    assert tls is not None
    subject = dict(rdn[0] for rdn in tls.getpeercert()["subject"])
    assert subject["commonName"] == "client.example"


async def test_require_verify_refuses_a_certificate_from_another_ca(nursery, tmp_path, certs):
    nsqd = await start_nsqd(
        nursery,
        str(tmp_path),
        **certs.nsqd_options(
            tls_client_auth_policy="require-verify", tls_root_ca_file=certs.ca_file
        ),
    )
    context = certs.client_context()
    trustme.CA().issue_cert("intruder.example").configure_cert(context)
    with pytest.raises(trio.BrokenResourceError):
        client, _ = await Client.upgraded(nsqd, context)
        await client.frame()


async def test_unusable_certificate_stops_nsqd(nursery, tmp_path, certs):
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(StartupError, match="failed to build TLS config - "):
        await start_nsqd(nursery, str(tmp_path), tls_cert=certs.server, tls_key=missing)


# -- --tls-required -------------------------------------------------------------------------


@pytest.mark.parametrize("required", ["true", "tcp-https"])
async def test_tls_required_refuses_commands_before_tls(nursery, tmp_path, certs, required):
    nsqd = await start_nsqd(nursery, str(tmp_path), **certs.nsqd_options(tls_required=required))
    for command, name in [
        (pub("t", b"x"), b"PUB"),
        (sub("t", "c"), b"SUB"),
        (b"NOP\n", b"NOP"),
        (b"BOGUS\n", b"BOGUS"),
        (b"MPUB t\n" + struct.pack(">i", 1 << 30), b"MPUB"),  # refused before the body
    ]:
        client = await Client.connect(nsqd)
        await client.send(command)
        assert (
            await client.error()
            == b"E_INVALID cannot " + name + b" in current state (TLS required)"
        )
        assert await client.closed()
    # IDENTIFY without TLS is answered, what follows is not.
    client = await Client.connect(nsqd)
    await client.send(identify({"feature_negotiation": True}) + pub("t", b"x"))
    assert json.loads(await client.response())["tls_v1"] is False
    assert await client.error() == b"E_INVALID cannot PUB in current state (TLS required)"
    assert await client.closed()
    # After the TLS upgrade everything works, compression included.
    client, _ = await Client.upgraded(nsqd, certs.client_context(), snappy=True)
    await client.pub_sub_round_trip("t")


async def test_client_auth_policy_implies_tls_required(nursery, tmp_path, certs):
    options = dataclasses.replace(
        NSQDOptions(),
        tcp_address="127.0.0.1:0",
        http_address="",
        data_path=str(tmp_path),
        **certs.nsqd_options(tls_client_auth_policy="require", tls_root_ca_file=certs.ca_file),
    )
    options.validate()  # as the command line does: Go's nsqd.New
    nsqd = NSQD(options, run_blocking=run_inline)
    await nursery.start(nsqd.run)
    assert nsqd.options.tls_required == "true"
    client = await Client.connect(nsqd)
    await client.send(pub("t", b"x"))
    assert await client.error() == b"E_INVALID cannot PUB in current state (TLS required)"


# -- hostile compressed streams -------------------------------------------------------------


@pytest.mark.parametrize("feature", ["snappy", "deflate"])
async def test_garbage_after_compression_closes_only_that_connection(
    nursery, tmp_path, caplog, feature
):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    other, _ = await Client.upgraded(nsqd, **{feature: True})
    hostile, _ = await Client.upgraded(nsqd, **{feature: True})
    raw = hostile.stream.transport_stream.transport_stream  # type: ignore[attr-defined]
    await raw.send_all(b"\xff" * 64 + os.urandom(4096))
    assert await hostile.closed()
    with trio.fail_after(5):
        while len(nsqd.clients) != 1:
            await trio.sleep(0.01)
    assert any("failed to read command" in r.getMessage() for r in caplog.records)
    await other.pub_sub_round_trip("t")


# -- HTTPS ----------------------------------------------------------------------------------


def _https_client(certs: Certs) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=certs.client_context(), timeout=5)


async def test_https_serves_the_api(nursery, tmp_path, certs, caplog):
    caplog.set_level(logging.INFO, "trionsq.nsqd")
    nsqd = await start_nsqd(
        nursery, str(tmp_path), **certs.nsqd_options(http_address="127.0.0.1:0")
    )
    assert nsqd.https_address is not None
    host, port = nsqd.https_address
    assert f"HTTPS: listening on {host}:{port}" in caplog.text
    async with _https_client(certs) as http:
        response = await http.get(f"https://{host}:{port}/ping")
        assert (response.status_code, response.text) == (200, "OK")
        response = await http.post(f"https://{host}:{port}/pub?topic=t", content=b"hello")
        assert (response.status_code, response.text) == (200, "OK")
    async with httpx.AsyncClient(verify=ssl.create_default_context(), timeout=5) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(f"https://{host}:{port}/ping")  # the CA is not trusted
    # Plain HTTP stays open without --tls-required.
    host, port = nsqd.http_address  # type: ignore[misc]
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.get(f"http://{host}:{port}/ping")).text == "OK"


async def test_no_https_without_a_certificate(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), https_address="127.0.0.1:0")
    assert nsqd.https_address is None and nsqd.tls_context is None


@pytest.mark.parametrize("path", ["/ping", "/stats", "/pub?topic=t", "/no/such/route"])
async def test_tls_required_true_refuses_plain_http(nursery, tmp_path, certs, path):
    nsqd = await start_nsqd(
        nursery,
        str(tmp_path),
        **certs.nsqd_options(http_address="127.0.0.1:0", tls_required="true"),
    )
    assert nsqd.http_address is not None and nsqd.https_address is not None
    host, port = nsqd.http_address
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.post(f"http://{host}:{port}{path}", content=b"x")
    assert response.status_code == 403
    https_port = nsqd.https_address[1]
    assert response.text == f'{{"message": "TLS_REQUIRED", "https_port": {https_port}}}'
    assert response.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    host, port = nsqd.https_address
    async with _https_client(certs) as http:
        response = await http.get(f"https://{host}:{port}/ping")
    assert (response.status_code, response.text) == (200, "OK")


async def test_tls_required_tcp_https_leaves_plain_http_open(nursery, tmp_path, certs):
    nsqd = await start_nsqd(
        nursery,
        str(tmp_path),
        **certs.nsqd_options(http_address="127.0.0.1:0", tls_required="tcp-https"),
    )
    assert nsqd.http_address is not None
    host, port = nsqd.http_address
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.get(f"http://{host}:{port}/ping")
    assert (response.status_code, response.text) == (200, "OK")


async def test_https_requires_the_client_certificate_too(nursery, tmp_path, certs):
    """Go's HTTPS listener uses the same tls.Config, client auth policy included."""
    nsqd = await start_nsqd(
        nursery,
        str(tmp_path),
        **certs.nsqd_options(
            tls_client_auth_policy="require-verify", tls_root_ca_file=certs.ca_file
        ),
    )
    assert nsqd.https_address is not None
    host, port = nsqd.https_address
    async with _https_client(certs) as http:
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            await http.get(f"https://{host}:{port}/ping")
    async with httpx.AsyncClient(verify=certs.client_context(with_cert=True), timeout=5) as http:
        response = await http.get(f"https://{host}:{port}/ping")
    assert (response.status_code, response.text) == (200, "OK")


# -- the benchmark's blocking client --------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_bench_reader_connections_negotiate_each_transport(
    nursery, tmp_path, certs, transport
):
    """`trionsq bench reader --transport ...` connects, upgrades and receives over each."""
    nsqd = await start_nsqd(nursery, str(tmp_path), **certs.nsqd_options())
    producer, _ = await Client.upgraded(nsqd)
    await producer.send(mpub("t", [b"a" * 100, b"b" * 100]))
    assert await producer.response() == b"OK"
    spec = TransportSpec(transport, deflate_level=3, tls_ca_file=certs.ca_file)
    assert isinstance(nsqd.tcp_address, tuple)
    address = nsqd.tcp_address

    def consume() -> list[bytes]:
        conn, pending = subscribe_with(address, "t", "ch", spec)
        try:
            conn.settimeout(5)
            conn.sendall(b"RDY 2\n")
            buf, ids = pending, []
            while len(ids) < 2:
                buf += conn.recv(65536)
                pos, _ = parse_batch(buf, 0, ids)
                buf = buf[pos:]
            conn.sendall(b"FIN " + b"\nFIN ".join(ids) + b"\n")
            return ids
        finally:
            conn.close()

    ids = await trio.to_thread.run_sync(consume)
    assert len(ids) == 2
