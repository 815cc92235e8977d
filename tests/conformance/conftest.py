"""Conformance suite fixtures: the nsqd under test (given by address, or one we start) and
connections to it.

    pytest tests/conformance                                   # starts trionsq nsqd
    pytest tests/conformance --nsqd-tcp-address=127.0.0.1:4150  # any nsqd (e.g. Go's)

The environment variables NSQD_TCP_ADDRESS / NSQD_HTTP_ADDRESS work as fallbacks.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

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
def api(
    nsqd_http: tuple[str, int], _http_client: httpx.Client | None, topic: str
) -> Iterator[httpx.Client]:
    """A blocking HTTP client for the nsqd under test (skipped when no HTTP address is known).
    The test's `topic` is deleted afterwards, so HTTP tests leave no topics behind."""
    assert _http_client is not None
    yield _http_client
    _http_client.post("/topic/delete", params={"topic": topic})


Connect = Callable[..., NSQConn]


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
def topic() -> str:
    """A fresh topic name (unique per test, so tests can share one daemon)."""
    return unique_name("conf_t")


@pytest.fixture
def channel() -> str:
    return unique_name("conf_c")
