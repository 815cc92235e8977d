"""Conformance suite fixtures: the nsqd and the nsqlookupd under test (given by address,
or one we start) and connections to them.

    pytest tests/conformance                                   # starts trionsq nsqd
    pytest tests/conformance --nsqd-tcp-address=127.0.0.1:4150  # any nsqd (e.g. Go's)
    pytest tests/conformance -k lookupd \
        --nsqlookupd-tcp-address=127.0.0.1:4160 --nsqlookupd-http-address=127.0.0.1:4161

The environment variables NSQD_TCP_ADDRESS / NSQD_HTTP_ADDRESS and NSQLOOKUPD_TCP_ADDRESS /
NSQLOOKUPD_HTTP_ADDRESS work as fallbacks. Each daemon is started only when a test needs it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from .lookupd_conn import MAGIC_V1, LookupdConn, peer_info
from .nsq_conn import NSQConn


def _parse(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "127.0.0.1", int(port)


def _option(config: pytest.Config, name: str, env: str) -> str | None:
    value = config.getoption(name, default=None)
    return value or os.environ.get(env) or None


@pytest.fixture(scope="session")
def nsqd_addresses(
    pytestconfig: pytest.Config,
) -> Iterator[tuple[tuple[str, int], tuple[str, int] | None]]:
    """(tcp, http-or-None) of the nsqd under test."""
    tcp = _option(pytestconfig, "nsqd_tcp_address", "NSQD_TCP_ADDRESS")
    http = _option(pytestconfig, "nsqd_http_address", "NSQD_HTTP_ADDRESS")
    if tcp:
        yield _parse(tcp), (_parse(http) if http else None)
        return
    from trionsq.testing import DaemonProcess

    with DaemonProcess("nsqd") as daemon:
        yield daemon.tcp_address, (_parse(http) if http else daemon.http_address)


@pytest.fixture(scope="session")
def nsqd_tcp(nsqd_addresses: tuple[tuple[str, int], Any]) -> tuple[str, int]:
    return nsqd_addresses[0]


@pytest.fixture
def nsqd_http(nsqd_addresses: tuple[Any, tuple[str, int] | None]) -> tuple[str, int]:
    """The HTTP address; the test is skipped when none is known."""
    if nsqd_addresses[1] is None:
        pytest.skip("no nsqd HTTP address (use --nsqd-http-address)")
    return nsqd_addresses[1]


@pytest.fixture(scope="session")
def _http_client(
    nsqd_addresses: tuple[Any, tuple[str, int] | None],
) -> Iterator[httpx.Client | None]:
    """One keep-alive HTTP client for the session (None when no HTTP address is known)."""
    if nsqd_addresses[1] is None:
        yield None
        return
    host, port = nsqd_addresses[1]
    base_url = f"http://{host}:{port}"
    with httpx.Client(base_url=base_url, timeout=10.0, trust_env=False) as client:
        yield client


@pytest.fixture
def api(nsqd_http: tuple[str, int], _http_client: httpx.Client | None) -> httpx.Client:
    """A blocking HTTP client for the nsqd under test (skipped when no HTTP address is known).
    The test's `topic` is deleted afterwards (by the `topic` fixture)."""
    assert _http_client is not None
    return _http_client


Connect = Callable[..., NSQConn]

#: How late (seconds) past its due time nsqd may honour a deadline: a message timeout, a REQ
#: delay, a TOUCH-extended deadline, a DPUB or /pub defer. Go nsqd's queueScanLoop scans
#: every 100 ms (QueueScanInterval) only the channels listed at its last refresh, every 5 s
#: (QueueScanRefreshInterval), so a channel created since then waits up to 5 s for its first
#: scan: 5 s + the 100 ms tick and scheduling margin. That holds while nsqd has at most 20
#: channels (QueueScanSelectionCount, all scanned each tick); see the `topic` fixture.
SCAN_LATENESS = 5.0 + 1.5


@pytest.fixture
def connect(nsqd_tcp: tuple[str, int]) -> Iterator[Connect]:
    """`connect(**identify_fields)` opens a connection (magic sent); with keyword arguments
    it also IDENTIFYs with them (feature negotiation on) and checks the JSON reply arrives.
    `connect(magic=..., answer_heartbeats=...)` pass through to `NSQConn`."""
    conns: list[NSQConn] = []

    def _connect(
        *,
        magic: bytes | None = b"  V2",
        answer_heartbeats: bool = True,
        **identify: Any,
    ) -> NSQConn:
        conn = NSQConn(nsqd_tcp, magic=magic, answer_heartbeats=answer_heartbeats)
        conns.append(conn)
        if identify:
            conn.negotiate(**identify)
        return conn

    yield _connect
    for conn in conns:
        conn.close()


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@pytest.fixture
def topic(_http_client: httpx.Client | None) -> Iterator[str]:
    """A fresh topic name (unique per test, so tests can share one daemon), deleted with its
    channels afterwards when nsqd's HTTP address is known. The suite so leaves no channels
    behind: Go nsqd's queue scan samples 20 channels per tick, so every channel left over
    would make timeouts and deferrals later than `SCAN_LATENESS` allows."""
    name = unique_name("conf_t")
    yield name
    if _http_client is not None:
        _http_client.post("/topic/delete", params={"topic": name})


@pytest.fixture
def channel() -> str:
    return unique_name("conf_c")


# -- nsqlookupd -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LookupdAddresses:
    """Where the nsqlookupd under test listens; `started_here` when the suite started it
    (with ``--broadcast-address=127.0.0.1`` on this machine)."""

    tcp: tuple[str, int] | None
    http: tuple[str, int] | None
    started_here: bool


@pytest.fixture(scope="session")
def lookupd_addresses(pytestconfig: pytest.Config) -> Iterator[LookupdAddresses]:
    """The nsqlookupd under test: the addresses given (either may be missing), or a
    `trionsq nsqlookupd` started for the session when neither is."""
    tcp = _option(pytestconfig, "nsqlookupd_tcp_address", "NSQLOOKUPD_TCP_ADDRESS")
    http = _option(pytestconfig, "nsqlookupd_http_address", "NSQLOOKUPD_HTTP_ADDRESS")
    if tcp or http:
        yield LookupdAddresses(
            _parse(tcp) if tcp else None, _parse(http) if http else None, started_here=False
        )
        return
    from trionsq.testing import DaemonProcess

    with DaemonProcess("nsqlookupd") as daemon:
        deadline = time.monotonic() + 5.0
        while daemon.http_address is None and time.monotonic() < deadline:
            time.sleep(0.02)
        yield LookupdAddresses(daemon.tcp_address, daemon.http_address, started_here=True)


@pytest.fixture
def lookupd_tcp(lookupd_addresses: LookupdAddresses) -> tuple[str, int]:
    """nsqlookupd's TCP address; the test is skipped when none is known."""
    if lookupd_addresses.tcp is None:
        pytest.skip("no nsqlookupd TCP address (use --nsqlookupd-tcp-address)")
    return lookupd_addresses.tcp


@pytest.fixture
def lookupd_http(lookupd_addresses: LookupdAddresses) -> tuple[str, int]:
    """nsqlookupd's HTTP address; the test is skipped when none is known."""
    if lookupd_addresses.http is None:
        pytest.skip("no nsqlookupd HTTP address (use --nsqlookupd-http-address)")
    return lookupd_addresses.http


@pytest.fixture(scope="session")
def _lookupd_http_client(lookupd_addresses: LookupdAddresses) -> Iterator[httpx.Client | None]:
    if lookupd_addresses.http is None:
        yield None
        return
    host, port = lookupd_addresses.http
    base_url = f"http://{host}:{port}"
    with httpx.Client(base_url=base_url, timeout=10.0, trust_env=False) as client:
        yield client


@pytest.fixture
def lookupd_api(
    lookupd_http: tuple[str, int], _lookupd_http_client: httpx.Client | None
) -> httpx.Client:
    """A session-wide keep-alive HTTP client for nsqlookupd (skipped without HTTP)."""
    assert _lookupd_http_client is not None
    return _lookupd_http_client


NewTopic = Callable[..., str]


@pytest.fixture
def new_topic(
    lookupd_addresses: LookupdAddresses, _lookupd_http_client: httpx.Client | None
) -> Iterator[NewTopic]:
    """`new_topic(suffix="")` is a fresh topic name (``suffix`` e.g. ``"#ephemeral"``).
    Every name handed out is deleted from nsqlookupd afterwards over HTTP (when known), so
    the shared daemon keeps no keys from finished tests."""
    names: list[str] = []

    def _new(suffix: str = "") -> str:
        name = unique_name("conf_lt") + suffix
        names.append(name)
        return name

    yield _new
    if _lookupd_http_client is not None:
        for name in names:
            _lookupd_http_client.post("/topic/delete", params={"topic": name})


LookupdConnect = Callable[..., LookupdConn]


@pytest.fixture
def lookupd_connect(lookupd_tcp: tuple[str, int]) -> Iterator[LookupdConnect]:
    """`lookupd_connect(magic=b"  V1")` opens a V1 connection (magic sent unless None);
    all are closed after the test."""
    conns: list[LookupdConn] = []

    def _connect(*, magic: bytes | None = MAGIC_V1) -> LookupdConn:
        conn = LookupdConn(lookupd_tcp, magic=magic)
        conns.append(conn)
        return conn

    yield _connect
    for conn in conns:
        conn.close()


@pytest.fixture
def lookupd_producer(lookupd_connect: LookupdConnect) -> LookupdConnect:
    """`lookupd_producer(**fields)` opens a connection that IDENTIFYs like an nsqd, with
    `peer_info(**fields)` (unique broadcast_address and hostname), and checks the reply
    is a JSON object; `conn.peer` is the body sent."""

    def _producer(**fields: Any) -> LookupdConn:
        conn = lookupd_connect()
        conn.identify_as(peer_info(**fields))
        return conn

    return _producer
