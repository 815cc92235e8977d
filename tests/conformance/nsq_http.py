"""Blocking helpers for nsqd's HTTP API in the conformance suite (docs/protocol.md §4).

Every helper checks a reply exactly as Go nsqd's `http_api.RespondV1` writes it: errors are
the compact JSON ``{"message":"<TEXT>"}`` with ``Content-Type: application/json;
charset=utf-8`` and ``X-NSQ-Content-Type: nsq; version=1.0``; a string is text that Go's
net/http sniffs as ``text/plain; charset=utf-8``; nothing is an empty body with no
Content-Type at all.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

V1_HEADER = "x-nsq-content-type"
V1_VALUE = "nsq; version=1.0"
JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
#: What nsq's own clients (nsqadmin, nsq_stat, ...) send to ask for V1 answers.
ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}

T = TypeVar("T")


def _show(response: httpx.Response) -> str:
    return f"{response.status_code} {dict(response.headers)!r} {response.content[:300]!r}"


def expect_error(response: httpx.Response, status: int, message: str) -> None:
    """A V1 error: the status, the exact JSON body and both content-type headers."""
    expected = json.dumps({"message": message}, separators=(",", ":")).encode()
    got = (response.status_code, response.content)
    assert got == (status, expected), f"expected {status} {expected!r}, got {_show(response)}"
    assert response.headers.get("content-type") == JSON_TYPE, _show(response)
    assert response.headers.get(V1_HEADER) == V1_VALUE, _show(response)


def expect_text(response: httpx.Response, text: str) -> None:
    """A V1 200 answer with a string (e.g. /pub's ``OK``)."""
    assert (response.status_code, response.text) == (200, text), _show(response)
    assert response.headers.get("content-type") == TEXT_TYPE, _show(response)
    assert response.headers.get(V1_HEADER) == V1_VALUE, _show(response)


def expect_empty(response: httpx.Response) -> None:
    """A V1 200 answer with nil (the admin routes): empty body, no Content-Type."""
    assert (response.status_code, response.content) == (200, b""), _show(response)
    assert "content-type" not in response.headers, _show(response)
    assert response.headers.get(V1_HEADER) == V1_VALUE, _show(response)


def expect_json(response: httpx.Response) -> Any:
    """A V1 200 answer with a value: its decoded JSON."""
    assert response.status_code == 200, _show(response)
    assert response.headers.get("content-type") == JSON_TYPE, _show(response)
    assert response.headers.get(V1_HEADER) == V1_VALUE, _show(response)
    return response.json()


def stats(api: httpx.Client, **params: str) -> dict[str, Any]:
    """``GET /stats?format=json`` (memory stats left out unless asked for)."""
    params = {"format": "json", "include_mem": "false", **params}
    value = expect_json(api.get("/stats", params=params))
    assert isinstance(value, dict), value
    return value


def topic_stats(api: httpx.Client, topic: str) -> dict[str, Any] | None:
    """The stats of one topic (None when nsqd does not have it)."""
    topics = stats(api, topic=topic)["topics"]
    if topics is None:
        return None
    assert [t["topic_name"] for t in topics] == [topic], topics
    return topics[0]


def channel_stats(api: httpx.Client, topic: str, channel: str) -> dict[str, Any]:
    found = topic_stats(api, topic)
    assert found is not None, f"topic {topic} not found"
    for c in found["channels"]:
        if c["channel_name"] == channel:
            return c
    raise AssertionError(f"channel {channel} not in {found['channels']!r}")


def eventually(check: Callable[[], T], timeout: float = 3.0) -> T:
    """`check()`'s result once it stops failing an assertion (nsqd's topic pump moves
    messages into channels asynchronously, so counters settle shortly after a reply)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def mpub_binary(bodies: list[bytes]) -> bytes:
    """The ``/mpub?binary=true`` body: the TCP MPUB body format."""
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def raw_request(
    address: tuple[str, int], head: bytes, timeout: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """Send `head` (request line and headers; any body the test wants to send included) on
    a fresh socket and read one response: (status, lower-cased headers, body). For requests
    httpx will not send as written (a Content-Length without the body)."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(head)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed before the response headers: {buf!r}"
            buf += chunk
        header_block, _, body = buf.partition(b"\r\n\r\n")
        status_line, *lines = header_block.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed in the response body: {body!r}"
            body += chunk
        return int(status_line.split(" ")[1]), headers, body[:length]


def raw_until_closed(address: tuple[str, int], request: bytes, timeout: float = 3.0) -> bytes:
    """Send `request` and read everything until the server closes the connection."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(request)
        deadline = time.monotonic() + timeout
        data = b""
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"the server did not close; got {data!r}") from None
            if not chunk:
                return data
            data += chunk


def expect_raw_error(
    response: tuple[int, dict[str, str], bytes], status: int, message: str
) -> None:
    expected = json.dumps({"message": message}, separators=(",", ":")).encode()
    assert (response[0], response[2]) == (status, expected), response
    assert response[1].get("content-type") == JSON_TYPE, response
    assert response[1].get(V1_HEADER) == V1_VALUE, response
