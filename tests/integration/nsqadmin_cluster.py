"""Helpers shared by the nsqadmin integration tests: a trionsq cluster on 127.0.0.1 (nsqlookupd
and nsqds as `DaemonProcess` subprocesses), nsqadmin in the test's Trio run, and small HTTP
helpers that read the daemons' own APIs."""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from trionsq.nsqadmin.nsqadmin import NSQAdmin
from trionsq.nsqadmin.options import parse_nsqadmin_args
from trionsq.testing import DaemonProcess

__all__ = [
    "Cluster",
    "closed_port",
    "eventually",
    "get_json",
    "http_address",
    "make_topic",
    "nsqd_topic",
    "post",
    "running_admin",
    "start_nsqd",
    "unique_name",
]

_names = itertools.count()


def unique_name(prefix: str) -> str:
    """A topic name no other test (or test run) uses."""
    return f"{prefix}{os.getpid()}_{next(_names)}"


def http_address(daemon: DaemonProcess) -> str:
    """A daemon's HTTP address as ``host:port``."""
    address = daemon.http_address
    assert address is not None
    return f"{address[0]}:{address[1]}"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, lookupd: DaemonProcess, nsqds: list[DaemonProcess]) -> None:
        self.lookupd = lookupd
        self.nsqds = nsqds
        self.lookupd_http = http_address(lookupd)
        self.nsqd_http = [http_address(n) for n in nsqds]


def start_nsqd(lookupd: DaemonProcess, *args: str) -> DaemonProcess:
    """An nsqd registering with `lookupd`, broadcasting 127.0.0.1 unless `args` say else."""
    host, port = lookupd.tcp_address
    return DaemonProcess(
        "nsqd", [f"--lookupd-tcp-address={host}:{port}", "--broadcast-address=127.0.0.1", *args]
    )


@asynccontextmanager
async def running_admin(*args: str) -> AsyncIterator[tuple[NSQAdmin, httpx.AsyncClient]]:
    """nsqadmin in this test's Trio run, and a client whose base URL is its address."""
    options = parse_nsqadmin_args(["--http-address=127.0.0.1:0", *args])
    options.validate()
    admin = NSQAdmin(options)
    async with trio.open_nursery() as nursery:
        await nursery.start(admin.run)
        base = f"http://127.0.0.1:{admin.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            yield admin, client
        admin.request_exit()


async def get_json(address: str, path: str) -> Any:
    """GET ``http://<address><path>`` (2xx expected) and decode its JSON."""
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"http://{address}{path}")
        response.raise_for_status()
        return response.json()


async def post(address: str, path: str, content: bytes = b"") -> None:
    """POST to ``http://<address><path>`` (2xx expected)."""
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(f"http://{address}{path}", content=content)
        response.raise_for_status()


async def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll the async `check` until it returns something truthy."""
    with trio.fail_after(timeout):
        while True:
            result = await check()
            if result:
                return result
            await trio.sleep(0.05)


async def nsqd_topic(address: str, topic: str) -> dict[str, Any] | None:
    """The nsqd's own ``/stats`` entry for `topic`, or None when it does not have it."""
    stats = await get_json(address, f"/stats?format=json&topic={topic}")
    for t in stats["topics"] or []:
        if t["topic_name"] == topic:
            return dict(t)
    return None


async def make_topic(cluster: Cluster, topic: str, channel: str, counts: list[int]) -> None:
    """Publish counts[i] messages to `topic` on nsqd i (with `channel`), and wait until the
    lookupd lists every nsqd as a producer of it."""
    for address, count in zip(cluster.nsqd_http, counts, strict=True):
        await post(address, f"/topic/create?topic={topic}")
        await post(address, f"/channel/create?topic={topic}&channel={channel}")
        for _ in range(count):
            await post(address, f"/pub?topic={topic}", b"hello")

    async def registered() -> bool:
        lookup = await get_json(cluster.lookupd_http, f"/lookup?topic={topic}")
        return len(lookup["producers"]) == len(cluster.nsqds) and channel in lookup["channels"]

    await eventually(registered)
