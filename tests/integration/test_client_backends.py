"""trionsq.client's conformance under both async libraries it runs on: every scenario runs once
under asyncio and once under Trio (``anyio.run(..., backend=)``), against real nsqds started
as subprocesses: IDENTIFY, RDY, backoff, max_attempts, TLS, snappy, deflate, AUTH, lookupd
discovery and reconnects."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme

from trionsq.client import (
    ClientError,
    Consumer,
    Message,
    NotConnectedError,
    NSQError,
    Producer,
    TLSError,
)
from trionsq.testing import DaemonProcess, free_ports
from trionsq.testing.pytest import AuthServer

BACKENDS = ["asyncio", "trio"]


@pytest.fixture(params=BACKENDS)
def run(request: pytest.FixtureRequest) -> Callable[[Callable[[], Awaitable[None]]], None]:
    """Runs a scenario under the async library the test is parametrized with, in a thread of
    its own: the browser tests' Playwright (sync API) leaves an asyncio loop marked running
    in the main thread for the session, where asyncio.run refuses to start another."""

    def run_on(scenario: Callable[[], Awaitable[None]]) -> None:
        outcome: list[BaseException] = []

        def in_thread() -> None:
            try:
                anyio.run(scenario, backend=request.param)
            except BaseException as exc:  # raised again in the test's thread
                outcome.append(exc)

        thread = threading.Thread(target=in_thread, name=f"scenario-{request.param}")
        thread.start()
        thread.join()
        if outcome:
            raise outcome[0]

    return run_on


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of the test's own (both backends share the module's daemons)."""
    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    return name[-60:].lstrip("_") + "_t"


def tcp(daemon: DaemonProcess) -> str:
    host, port = daemon.tcp_address
    return f"{host}:{port}"


def http_get(daemon: DaemonProcess, path: str) -> Any:
    assert daemon.http_address is not None
    host, port = daemon.http_address
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
        return json.loads(response.read())


def channel_clients(daemon: DaemonProcess, topic: str, channel: str) -> list[dict[str, Any]]:
    stats = http_get(daemon, f"/stats?format=json&topic={topic}&channel={channel}")
    for t in stats["topics"]:
        for c in t["channels"]:
            if t["topic_name"] == topic and c["channel_name"] == channel:
                return list(c["clients"])
    return []


@pytest.fixture(scope="module")
def nsqd() -> Iterator[DaemonProcess]:
    with DaemonProcess("nsqd") as daemon:
        yield daemon


async def consume(address: str, topic: str, count: int, **options: Any) -> list[bytes]:
    got: list[bytes] = []
    async with Consumer(
        topic, "c", nsqd_tcp_addresses=[address], max_in_flight=100, **options
    ) as consumer:
        with anyio.fail_after(10):
            async for message in consumer:
                got.append(message.body)
                message.finish()
                if len(got) == count:
                    break
    return got


# -- IDENTIFY and the round trip -------------------------------------------------------------


def test_identify_and_a_round_trip(run: Any, nsqd: DaemonProcess, topic: str) -> None:
    async def scenario() -> None:
        async with Producer(tcp(nsqd), msg_timeout=30, sample_rate=0) as p:
            assert p.connection is not None
            info = p.connection.identify_response
            assert info["max_rdy_count"] == 2500
            assert info["msg_timeout"] == 30_000
            await p.pub(topic, b"one")
            await p.mpub(topic, [b"two", b"three"])
            await p.dpub(topic, 50, b"four")
            async with anyio.create_task_group() as tasks:
                for i in range(50):
                    tasks.start_soon(p.pub, topic, b"many %d" % i)
            with pytest.raises(NSQError) as info_error:
                await p.pub("bad topic!", b"x")
            assert info_error.value.code == "E_BAD_TOPIC"
        got = await consume(tcp(nsqd), topic, 54)
        assert sorted(got) == sorted(
            [b"one", b"two", b"three", b"four", *(b"many %d" % i for i in range(50))]
        )

    run(scenario)


# -- RDY ----------------------------------------------------------------------------------


def test_rdy_is_max_in_flight_and_handlers_finish(
    run: Any, nsqd: DaemonProcess, topic: str
) -> None:
    async def scenario() -> None:
        async with Producer(tcp(nsqd)) as p:
            await p.mpub(topic, [b"m%d" % i for i in range(20)])
        handled: list[bytes] = []
        done = anyio.Event()

        async def handler(message: Message) -> None:
            handled.append(message.body)
            if len(handled) == 20:
                done.set()

        async with Consumer(
            topic, "c", handler, nsqd_tcp_addresses=[tcp(nsqd)], max_in_flight=7
        ) as consumer:
            with anyio.fail_after(10):
                await done.wait()
            clients = await anyio.to_thread.run_sync(channel_clients, nsqd, topic, "c")
            assert [c["ready_count"] for c in clients] == [7]
            assert consumer.stats["finished"] == 20
        assert sorted(handled) == sorted(b"m%d" % i for i in range(20))

    run(scenario)


# -- backoff and max_attempts ----------------------------------------------------------------


def test_a_failing_handler_backs_off_and_gives_up_after_max_attempts(
    run: Any, nsqd: DaemonProcess, topic: str
) -> None:
    async def scenario() -> None:
        async with Producer(tcp(nsqd)) as p:
            await p.pub(topic, b"poison")
        attempts: list[int] = []
        given_up: list[bytes] = []
        done = anyio.Event()
        backoff_levels: list[int] = []

        async def handler(message: Message) -> None:
            attempts.append(message.attempts)
            raise ValueError("cannot handle this")

        def on_give_up(message: Message) -> None:
            given_up.append(message.body)
            done.set()

        consumer = Consumer(
            topic,
            "c",
            handler,
            nsqd_tcp_addresses=[tcp(nsqd)],
            max_attempts=3,
            on_give_up=on_give_up,
            requeue_delay=0.0,
            backoff_multiplier=0.05,
            max_backoff_duration=0.2,
        )
        async with consumer:
            with anyio.fail_after(15):
                while not done.is_set():
                    backoff_levels.append(consumer.backoff_counter)
                    await anyio.sleep(0.01)
        assert attempts == [1, 2, 3]
        assert given_up == [b"poison"]
        assert max(backoff_levels) >= 1  # each failure raised the backoff level
        assert consumer.stats == {"received": 4, "finished": 0, "requeued": 3, "given_up": 1}

    run(scenario)


# -- compression ----------------------------------------------------------------------------


@pytest.mark.parametrize("feature", ["snappy", "deflate"])
def test_compression(run: Any, nsqd: DaemonProcess, topic: str, feature: str) -> None:
    async def scenario() -> None:
        bodies = [b"compressible %d " % i * 30 for i in range(100)]
        async with Producer(tcp(nsqd), **{feature: True}) as p:
            assert p.connection is not None
            assert p.connection.identify_response[feature] is True
            await p.mpub(topic, bodies)
        assert await consume(tcp(nsqd), topic, 100, **{feature: True}) == bodies

    run(scenario)


# -- TLS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, str]]:
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    pem = directory / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with DaemonProcess("nsqd", args=[f"--tls-cert={pem}", f"--tls-key={pem}"]) as daemon:
        yield daemon, str(ca_file)


def test_tls_with_and_without_snappy(
    run: Any, tls_nsqd: tuple[DaemonProcess, str], topic: str
) -> None:
    daemon, ca_file = tls_nsqd

    async def scenario() -> None:
        for snappy in (False, True):
            options = {"tls_v1": True, "tls_cafile": ca_file, "snappy": snappy}
            async with Producer(tcp(daemon), **options) as p:
                assert p.connection is not None
                assert p.connection.identify_response["tls_v1"] is True
                await p.mpub(topic, [b"secret", b"again"])
            assert await consume(tcp(daemon), topic, 2, **options) == [b"secret", b"again"]
        with pytest.raises(TLSError, match="CERTIFICATE_VERIFY_FAILED"):
            async with Producer(tcp(daemon), tls_v1=True):
                pass

    run(scenario)


# -- AUTH -------------------------------------------------------------------------------------

# nsqd's auth server: the one trionsq.testing's pytest plugin runs for other projects
_GRANTS: dict[str, Any] = {
    "alice": [{"topic": ".*_auth_t$", "channels": [".*"], "permissions": ["publish", "subscribe"]}],
    "nobody": [],
}


@pytest.fixture(scope="module")
def auth_nsqd() -> Iterator[DaemonProcess]:
    server = AuthServer(_GRANTS)
    try:
        with DaemonProcess("nsqd", args=[f"--auth-http-address={server.address}"]) as daemon:
            yield daemon
    finally:
        server.close()


def test_auth(run: Any, auth_nsqd: DaemonProcess, topic: str) -> None:
    allowed = topic[: -len("_t")] + "_auth_t"

    async def scenario() -> None:
        async with Producer(tcp(auth_nsqd), auth_secret="alice") as p:
            assert p.connection is not None
            assert p.connection.auth_response == {
                "identity": "alice",
                "identity_url": "",
                "permission_count": 1,
            }
            await p.pub(allowed, b"paid")
            with pytest.raises(NSQError) as refused:
                await p.pub("elsewhere", b"x")
            assert refused.value.code == "E_UNAUTHORIZED"
        assert await consume(tcp(auth_nsqd), allowed, 1, auth_secret="alice") == [b"paid"]
        with pytest.raises(NSQError) as nobody:
            async with Producer(tcp(auth_nsqd), auth_secret="nobody"):
                pass
        assert nobody.value.code == "E_UNAUTHORIZED"

    run(scenario)


# -- lookupd discovery ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[DaemonProcess, list[DaemonProcess]]]:
    with DaemonProcess("nsqlookupd") as lookupd:
        host, port = lookupd.tcp_address
        registered = [f"--lookupd-tcp-address={host}:{port}", "--broadcast-address=127.0.0.1"]
        with (
            DaemonProcess("nsqd", args=registered) as one,
            DaemonProcess("nsqd", args=registered) as two,
        ):
            yield lookupd, [one, two]


def test_lookupd_discovers_every_nsqd_of_a_topic(
    run: Any, cluster: tuple[DaemonProcess, list[DaemonProcess]], topic: str
) -> None:
    lookupd, nsqds = cluster
    assert lookupd.http_address is not None
    lookupd_http = "{}:{}".format(*lookupd.http_address)

    async def scenario() -> None:
        for i, daemon in enumerate(nsqds):
            async with Producer(tcp(daemon)) as p:
                await p.pub(topic, b"from %d" % i)
        # each nsqd registers the topic with lookupd as it is created
        with anyio.fail_after(10):
            while len(await anyio.to_thread.run_sync(_producers, lookupd, topic)) < 2:
                await anyio.sleep(0.05)
        got: list[bytes] = []
        async with Consumer(
            topic, "c", lookupd_http_addresses=[lookupd_http], max_in_flight=10
        ) as consumer:
            with anyio.fail_after(10):
                async for message in consumer:
                    got.append(message.body)
                    message.finish()
                    if len(got) == 2:
                        break
            assert len(consumer.connections) == 2
        assert sorted(got) == [b"from 0", b"from 1"]

    run(scenario)


def _producers(lookupd: DaemonProcess, topic: str) -> list[Any]:
    try:
        return list(http_get(lookupd, f"/lookup?topic={topic}")["producers"])
    except OSError:  # 404 until the topic is registered
        return []


# -- reconnects -----------------------------------------------------------------------------


def test_producer_and_consumer_reconnect_to_a_restarted_nsqd(
    run: Any, tmp_path: Path, topic: str
) -> None:
    tcp_port, http_port = free_ports(2)
    args = [f"--tcp-address=127.0.0.1:{tcp_port}", f"--http-address=127.0.0.1:{http_port}"]
    data = str(tmp_path)
    address = f"127.0.0.1:{tcp_port}"

    async def scenario() -> None:
        daemon = DaemonProcess("nsqd", args=args, data_path=data)
        got: list[bytes] = []
        try:
            async with (
                Producer(address) as p,
                Consumer(
                    topic, "c", nsqd_tcp_addresses=[address], reconnect_interval=0.2
                ) as consumer,
            ):
                await p.pub(topic, b"before")
                async for message in consumer:
                    got.append(message.body)
                    message.finish()
                    break
                await anyio.to_thread.run_sync(daemon.terminate)
                daemon.close()
                with pytest.raises(ClientError):  # lost (ConnectionClosed) or refused
                    await p.pub(topic, b"while down")
                daemon = await anyio.to_thread.run_sync(
                    lambda: DaemonProcess("nsqd", args=args, data_path=data)
                )
                await p.pub(topic, b"after")  # the producer dials again
                with anyio.fail_after(10):
                    async for message in consumer:  # the consumer dialled again too
                        got.append(message.body)
                        message.finish()
                        if message.body == b"after":
                            break
        finally:
            daemon.close()
        assert got[0] == b"before" and got[-1] == b"after"

    run(scenario)


def test_consumer_reports_an_unreachable_nsqd_as_not_connected(run: Any) -> None:
    (port,) = free_ports(1)

    async def scenario() -> None:
        with pytest.raises(NotConnectedError) as refused:
            async with Consumer("t", "c", nsqd_tcp_addresses=[f"127.0.0.1:{port}"]):
                pass
        assert str(refused.value) == f"dial tcp 127.0.0.1:{port}: connect: connection refused"

    run(scenario)


def test_an_error_inside_async_with_leaves_as_itself(
    run: Any, nsqd: DaemonProcess, topic: str
) -> None:
    async def scenario() -> None:
        with pytest.raises(LookupError, match="the caller's own"):
            async with Producer(tcp(nsqd)) as producer:
                await producer.pub(topic, b"x")
                raise LookupError("the caller's own")
        with pytest.raises(LookupError, match="the caller's own"):
            async with Consumer(topic, "c", nsqd_tcp_addresses=[tcp(nsqd)]):
                raise LookupError("the caller's own")

    run(scenario)
