"""trionsq.client raises only its documented `ClientError`s (issue 29), from ``async with`` as
from each call, one test per kind: connection refused, reset, no answer in time, TLS failure,
a bad IDENTIFY reply, E_* error frames; and a lost nsqd is a logged retry, never an
ExceptionGroup. The servers are real sockets on 127.0.0.1 port 0 playing nsqd's part."""

from __future__ import annotations

import json
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import trio
import trustme

from tests.nsqd_harness import start_nsqd
from trionsq.client import (
    ClientError,
    Consumer,
    NotConnectedError,
    NSQError,
    Producer,
    ProtocolError,
    TLSError,
)
from trionsq.protocol import encode_error, encode_response

Serve = Callable[[trio.SocketStream], Awaitable[None]]


async def serve(nursery: trio.Nursery, handler: Serve) -> tuple[str, trio.CancelScope]:
    """Serve each connection with `handler` on a port of 127.0.0.1: its address, and the scope
    that stops listening."""
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[list[trio.SocketListener]]) -> None:
        with scope:
            await trio.serve_tcp(handler, 0, host="127.0.0.1", task_status=task_status)

    listeners = await nursery.start(run)
    return f"127.0.0.1:{listeners[0].socket.getsockname()[1]}", scope


async def read_identify(stream: trio.SocketStream) -> bytes:
    """The magic and the IDENTIFY command: its JSON body."""
    buf = b""
    head = len(b"  V2IDENTIFY\n") + 4
    while len(buf) < head or len(buf) < head + struct.unpack(">i", buf[head - 4 : head])[0]:
        data = await stream.receive_some()
        if not data:
            raise EOFError
        buf += data
    return buf[head:]


def identify_reply(**features: object) -> bytes:
    return encode_response(json.dumps({"max_rdy_count": 2500, **features}).encode())


@pytest.fixture
def refusing_address() -> Iterator[str]:
    """A port held bound but not listening: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


# -- refused --------------------------------------------------------------------------------


async def test_refused_is_not_connected_in_gos_words(refusing_address: str) -> None:
    with pytest.raises(NotConnectedError) as info:
        async with Producer(refusing_address):
            pass
    assert str(info.value) == f"dial tcp {refusing_address}: connect: connection refused"
    assert isinstance(info.value.__cause__, OSError)


async def test_a_consumer_raises_not_connected_not_an_exception_group(
    refusing_address: str,
) -> None:
    """Was: the consumer's `async with` body ran, then an ExceptionGroup of OSError escaped."""
    with pytest.raises(NotConnectedError, match="connection refused"):
        async with Consumer("t", "c", nsqd_tcp_addresses=[refusing_address]):
            pytest.fail("the consumer started without its nsqd")


async def test_a_publish_after_nsqd_went_away_is_not_connected(
    nursery: trio.Nursery,
) -> None:
    """Was a bare OSError, which `except ClientError` missed."""
    first = trio.Event()

    async def once(stream: trio.SocketStream) -> None:
        await read_identify(stream)
        await stream.send_all(identify_reply())
        first.set()
        await stream.aclose()

    address, listening = await serve(nursery, once)
    async with Producer(address) as producer:
        await first.wait()
        listening.cancel()  # nsqd is gone: the reconnection is refused
        assert producer.connection is not None
        await producer.connection.closed_event.wait()
        with pytest.raises(NotConnectedError, match="connection refused"):
            await producer.pub("t", b"x")


async def test_a_consumer_retries_a_lost_nsqd_and_logs_it(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    """After it connected, a lost nsqd is retried in the background (a warning each time)."""
    subscribed = trio.Event()
    retried = trio.Event()

    async def once(stream: trio.SocketStream) -> None:
        await read_identify(stream)
        await stream.send_all(identify_reply())
        while b"SUB t c\n" not in await stream.receive_some():
            pass
        await stream.send_all(encode_response(b"OK"))
        subscribed.set()
        await stream.aclose()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "connection refused" in record.getMessage():
                retried.set()

    watch = Watch()
    logging.getLogger("trionsq.client").addHandler(watch)
    try:
        address, listening = await serve(nursery, once)
        async with Consumer("t", "c", nsqd_tcp_addresses=[address]) as consumer:
            await subscribed.wait()
            listening.cancel()
            await retried.wait()
            assert consumer.connections == {}
    finally:
        logging.getLogger("trionsq.client").removeHandler(watch)


# -- reset, EOF, no answer -------------------------------------------------------------------


async def test_reset_during_identify_is_not_connected(nursery: trio.Nursery) -> None:
    async def reset(stream: trio.SocketStream) -> None:
        await read_identify(stream)
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()  # RST

    address, _ = await serve(nursery, reset)
    with pytest.raises(NotConnectedError, match=rf"^{address}: connection .* during IDENTIFY"):
        async with Producer(address):
            pass


async def test_no_answer_in_connect_timeout_is_not_connected(nursery: trio.Nursery) -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    address, _ = await serve(nursery, silent)
    with pytest.raises(NotConnectedError) as info:
        async with Consumer("t", "c", nsqd_tcp_addresses=[address], connect_timeout=0.2):
            pass
    assert str(info.value) == f"{address}: no answer to IDENTIFY within 0.2 s"


# -- TLS ------------------------------------------------------------------------------------


async def test_an_untrusted_certificate_is_a_tls_error(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    pem = str(tmp_path / "server.pem")
    trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(pem)
    nsqd = await start_nsqd(nursery, str(tmp_path), tls_cert=pem, tls_key=pem)
    host, port = nsqd.tcp_address  # type: ignore[misc]
    with pytest.raises(TLSError, match="CERTIFICATE_VERIFY_FAILED"):
        async with Consumer("t", "c", nsqd_tcp_addresses=[f"{host}:{port}"], tls_v1=True):
            pass


async def test_a_missing_ca_file_is_a_tls_error(nursery: trio.Nursery, tmp_path: Path) -> None:
    async def offers_tls(stream: trio.SocketStream) -> None:
        await read_identify(stream)
        await stream.send_all(identify_reply(tls_v1=True))
        await trio.sleep_forever()

    address, _ = await serve(nursery, offers_tls)
    missing = str(tmp_path / "missing-ca.pem")
    with pytest.raises(TLSError, match="TLS files cannot be used"):
        async with Producer(address, tls_v1=True, tls_cafile=missing):
            pass


# -- replies outside the protocol, error frames ----------------------------------------------


async def test_a_bad_identify_reply_is_a_protocol_error(nursery: trio.Nursery) -> None:
    async def garbage(stream: trio.SocketStream) -> None:
        await read_identify(stream)
        await stream.send_all(encode_response(b"<html>not nsqd</html>"))
        await trio.sleep_forever()

    address, _ = await serve(nursery, garbage)
    with pytest.raises(ProtocolError, match="bad IDENTIFY response"):
        async with Producer(address):
            pass


async def test_an_identify_error_frame_is_an_nsq_error(nursery: trio.Nursery) -> None:
    async def refuses(stream: trio.SocketStream) -> None:
        await read_identify(stream)
        await stream.send_all(encode_error(b"E_BAD_BODY IDENTIFY heartbeat interval invalid"))
        await trio.sleep_forever()

    address, _ = await serve(nursery, refuses)
    with pytest.raises(NSQError) as info:
        async with Producer(address):
            pass
    assert info.value.code == "E_BAD_BODY"


async def test_a_refused_sub_is_an_nsq_error_from_async_with(nursery: trio.Nursery) -> None:
    async def refuses_sub(stream: trio.SocketStream) -> None:
        await read_identify(stream)
        await stream.send_all(identify_reply())
        while b"SUB" not in await stream.receive_some():
            pass
        await stream.send_all(encode_error(b"E_UNAUTHORIZED AUTH failed"))
        await trio.sleep_forever()

    address, _ = await serve(nursery, refuses_sub)
    with pytest.raises(NSQError) as info:
        async with Consumer("t", "c", nsqd_tcp_addresses=[address]):
            pass
    assert info.value.code == "E_UNAUTHORIZED"


def test_every_kind_is_a_client_error() -> None:
    for kind in (NotConnectedError, TLSError, ProtocolError, NSQError):
        assert issubclass(kind, ClientError)
    assert issubclass(TLSError, NotConnectedError)
