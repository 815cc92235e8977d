"""--max-defer-timeout (beyond NSQ: NSQ #1499, PR #1504): DPUB's and ``/pub?defer=``'s limit
apart from REQ's --max-req-timeout. Unset, the limit is --max-req-timeout's and every answer is
Go nsqd's; set, DPUB and /pub check it (Go's error texts, its figure), and REQ keeps clamping to
--max-req-timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.nsqd import NSQD
from trionsq.protocol import dpub, rdy, req


async def _nsqd(nursery: trio.Nursery, tmp_path: Any, **options: Any) -> NSQD:
    return await start_nsqd(nursery, str(tmp_path), http_address="127.0.0.1:0", **options)


@asynccontextmanager
async def _http(nsqd: NSQD) -> AsyncIterator[httpx.AsyncClient]:
    assert isinstance(nsqd.http_address, tuple)
    host, port = nsqd.http_address
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        yield client


async def _dpub_answer(nsqd: NSQD, defer_ms: int) -> tuple[bool, bytes]:
    """(ok, the OK or the error frame) for one DPUB."""
    conn = await Conn.open(nsqd)
    await conn.send(dpub("t", defer_ms, b"x"))
    frame_type, data = await conn.frame()
    await conn.aclose()
    return frame_type == 0, data


async def _pub_status(http: httpx.AsyncClient, defer_ms: int) -> tuple[int, str]:
    response = await http.post(f"/pub?topic=t&defer={defer_ms}", content=b"x")
    return response.status_code, response.text


async def test_unset_the_limit_is_max_req_timeouts_with_gos_answers(
    nursery: trio.Nursery, tmp_path: Any
) -> None:
    nsqd = await _nsqd(nursery, tmp_path, max_req_timeout=120.0)
    assert await _dpub_answer(nsqd, 120_000) == (True, b"OK")
    assert await _dpub_answer(nsqd, 120_001) == (
        False,
        b"E_INVALID DPUB timeout 120001 out of range 0-120000",
    )
    async with _http(nsqd) as http:
        assert await _pub_status(http, 120_000) == (200, "OK")
        assert await _pub_status(http, 120_001) == (400, '{"message":"INVALID_DEFER"}')
        response = await http.get("/config/max_defer_timeout")
        assert response.json() == 0  # unset


async def test_a_longer_limit_for_deferred_publishing_only(
    nursery: trio.Nursery, tmp_path: Any
) -> None:
    nsqd = await _nsqd(nursery, tmp_path, max_req_timeout=60.0, max_defer_timeout=7200.0)
    assert await _dpub_answer(nsqd, 7_200_000) == (True, b"OK")
    assert await _dpub_answer(nsqd, 7_200_001) == (
        False,
        b"E_INVALID DPUB timeout 7200001 out of range 0-7200000",
    )
    async with _http(nsqd) as http:
        assert await _pub_status(http, 7_200_000) == (200, "OK")
        assert await _pub_status(http, 7_200_001) == (400, '{"message":"INVALID_DEFER"}')
        response = await http.get("/config/max_defer_timeout")
        assert response.json() == 7_200_000_000_000  # Go's duration encoding: ns
    # REQ still clamps to --max-req-timeout (60 s), not to the defer limit.
    channel_due = await _requeue_due(nsqd, 600_000)
    assert 59.0 < channel_due <= 60.0


async def test_a_shorter_limit_for_deferred_publishing_only(
    nursery: trio.Nursery, tmp_path: Any
) -> None:
    nsqd = await _nsqd(nursery, tmp_path, max_defer_timeout=10.0)
    assert await _dpub_answer(nsqd, 10_000) == (True, b"OK")
    assert await _dpub_answer(nsqd, 10_001) == (
        False,
        b"E_INVALID DPUB timeout 10001 out of range 0-10000",
    )
    async with _http(nsqd) as http:
        assert await _pub_status(http, 10_001) == (400, '{"message":"INVALID_DEFER"}')
    # A REQ of a minute is not clamped to the defer limit (--max-req-timeout is 1 h).
    channel_due = await _requeue_due(nsqd, 60_000)
    assert 59.0 < channel_due <= 60.0


async def _requeue_due(nsqd: NSQD, timeout_ms: int) -> float:
    """REQ a fresh message with `timeout_ms`; how far ahead (s) the channel holds it."""
    consumer = await Conn.consumer(nsqd, "r", "c", ready=1)
    producer = await Conn.open(nsqd)
    await producer.send(b"PUB r\n\x00\x00\x00\x01x")
    assert await producer.response() == b"OK"
    message = await consumer.message()
    await consumer.send(rdy(0))
    await consumer.send(req(message.id, timeout_ms))
    channel = nsqd.topics["r"].channels["c"]
    with trio.fail_after(5):
        while not channel.deferred:
            await trio.sleep(0.01)
    return channel.deferred[0][0] - trio.current_time()
