"""trionsq.client's negotiated features against an in-process trionsq nsqd: TLS (trustme CA),
snappy, deflate, AUTH (a tiny auth server), and lookupd discovery of two nsqds through an
in-process nsqlookupd."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from tests.integration.test_nsqd_auth import AuthServer
from tests.nsqd_harness import start_nsqd
from trionsq.client import Consumer, Message, NSQError, Producer, TLSError
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqlookupd.nsqlookupd import NSQLookupd
from trionsq.nsqlookupd.options import NSQLookupdOptions


def address(nsqd: NSQD) -> str:
    assert isinstance(nsqd.tcp_address, tuple)
    return f"{nsqd.tcp_address[0]}:{nsqd.tcp_address[1]}"


async def round_trip(nsqd: NSQD, topic: str, **options: Any) -> list[bytes]:
    bodies = [b"hello %d " % i * 20 for i in range(50)]
    async with Producer(address(nsqd), **options) as producer:
        await producer.mpub(topic, bodies)
        await producer.pub(topic, b"last")
        conn = producer.connection
        assert conn is not None
        negotiated = conn.identify_response
    got: list[bytes] = []
    async with Consumer(
        topic, "c", nsqd_tcp_addresses=[address(nsqd)], max_in_flight=100, **options
    ) as consumer:
        with trio.fail_after(5):
            async for message in consumer:
                got.append(message.body)
                message.finish()
                if len(got) == len(bodies) + 1:
                    break
    assert got == [*bodies, b"last"]
    return [key.encode() for key, value in negotiated.items() if value is True]


async def test_snappy(nursery: trio.Nursery, tmp_path: Path) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    assert b"snappy" in await round_trip(nsqd, "sn", snappy=True)


async def test_deflate(nursery: trio.Nursery, tmp_path: Path) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    assert b"deflate" in await round_trip(nsqd, "df", deflate=True, deflate_level=3)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def test_tls_and_tls_with_snappy(
    nursery: trio.Nursery, tmp_path: Path, ca: trustme.CA
) -> None:
    server = str(tmp_path / "server.pem")
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(server)
    ca_file = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    nsqd = await start_nsqd(
        nursery, str(tmp_path), tls_cert=server, tls_key=server, tls_required=True
    )
    assert b"tls_v1" in await round_trip(nsqd, "tls", tls_v1=True, tls_cafile=ca_file)
    features = await round_trip(nsqd, "tls2", tls_v1=True, tls_cafile=ca_file, snappy=True)
    assert b"tls_v1" in features and b"snappy" in features


async def test_tls_refuses_an_untrusted_server(nursery: trio.Nursery, tmp_path: Path) -> None:
    other = trustme.CA()
    server = str(tmp_path / "server.pem")
    other.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(server)
    nsqd = await start_nsqd(nursery, str(tmp_path), tls_cert=server, tls_key=server)
    with pytest.raises(TLSError, match="CERTIFICATE_VERIFY_FAILED"):
        async with Producer(address(nsqd), tls_v1=True):
            pass


async def test_auth(nursery: trio.Nursery, tmp_path: Path) -> None:
    auth = await AuthServer().start(nursery)
    nsqd = await start_nsqd(nursery, str(tmp_path), auth_http_addresses=[auth.address])
    async with Producer(address(nsqd), auth_secret="alice") as producer:
        assert producer.connection is not None
        assert producer.connection.auth_response == {
            "identity": "alice",
            "identity_url": "https://id.example/alice",
            "permission_count": 2,
        }
        await producer.pub("orders", b"paid")
        with pytest.raises(NSQError) as info:
            await producer.pub("other", b"x")
        assert info.value.code == "E_UNAUTHORIZED"
    async with Consumer(
        "orders", "billing", nsqd_tcp_addresses=[address(nsqd)], auth_secret="alice"
    ) as consumer:
        with trio.fail_after(5):
            async for message in consumer:
                assert message.body == b"paid"
                message.finish()
                break
    with pytest.raises(NSQError) as info:
        async with Producer(address(nsqd), auth_secret="nobody"):
            pass
    assert info.value.code == "E_UNAUTHORIZED"


async def test_lookupd_discovers_two_nsqds(nursery: trio.Nursery, tmp_path: Path) -> None:
    options = dataclasses.replace(
        NSQLookupdOptions(), tcp_address="127.0.0.1:0", http_address="127.0.0.1:0"
    )
    lookupd = NSQLookupd(options)
    await nursery.start(lookupd.run)
    assert lookupd.tcp_address and lookupd.http_address
    nsqds = []
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        nsqds.append(
            await start_nsqd(
                nursery,
                str(tmp_path / str(i)),
                broadcast_address="127.0.0.1",
                http_address="127.0.0.1:0",
                nsqlookupd_tcp_addresses=[f"{lookupd.tcp_address[0]}:{lookupd.tcp_address[1]}"],
            )
        )
    for i, nsqd in enumerate(nsqds):
        async with Producer(address(nsqd)) as producer:
            await producer.pub("disc", b"from %d" % i)
    got: set[bytes] = set()
    done = trio.Event()

    async def handler(message: Message) -> None:
        got.add(message.body)
        if len(got) == 2:
            done.set()

    async with Consumer(
        "disc",
        "c",
        handler,
        lookupd_http_addresses=[f"{lookupd.http_address[0]}:{lookupd.http_address[1]}"],
        lookupd_poll_interval=0.2,
        max_in_flight=10,
    ) as consumer:
        with trio.fail_after(10):
            await done.wait()
        assert set(consumer.connections) == {address(n) for n in nsqds}
    assert got == {b"from 0", b"from 1"}
