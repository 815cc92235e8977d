"""nsqd HTTP API basics: /ping, /info, routing (404/405), the V1 response format and the
Accept negotiation, query parsing, and /config (docs/protocol.md §4; Go's nsqd/http.go and
internal/http_api/api_response.go)."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from .nsq_http import (
    ACCEPT_V1,
    JSON_TYPE,
    TEXT_TYPE,
    V1_HEADER,
    expect_empty,
    expect_error,
    expect_json,
    expect_text,
    raw_until_closed,
    stats,
    topic_stats,
)

MAX_MSG_SIZE = 1_048_576

# -- /ping --------------------------------------------------------------------------------


def test_ping_is_plain_ok(api: httpx.Client) -> None:
    response = api.get("/ping")
    assert (response.status_code, response.content) == (200, b"OK")
    # Go's /ping uses the PlainText decorator, not V1: the type is net/http's sniffed one
    # and there is no X-NSQ-Content-Type header.
    assert response.headers.get("content-type") == TEXT_TYPE
    assert V1_HEADER not in response.headers


# -- /info --------------------------------------------------------------------------------

INFO_FIELDS = {
    "version": str,
    "broadcast_address": str,
    "hostname": str,
    "http_port": int,
    "tcp_port": int,
    "start_time": int,
    "max_heartbeat_interval": int,
    "max_output_buffer_size": int,
    "max_output_buffer_timeout": int,
    "max_deflate_level": int,
}
# Added after 1.3.0 (topology-aware consumption); empty strings unless configured.
INFO_FIELDS_POST_130 = {"topology_zone", "topology_region"}


def test_info_fields_and_types(api: httpx.Client) -> None:
    info = expect_json(api.get("/info"))
    assert set(info) - INFO_FIELDS_POST_130 == set(INFO_FIELDS), sorted(info)
    for name, kind in INFO_FIELDS.items():
        assert type(info[name]) is kind, (name, info[name])
    for name in INFO_FIELDS_POST_130 & set(info):
        assert info[name] == "", (name, info[name])
    assert re.fullmatch(r"\d+\.\d+\.\d+(-\S+)?", info["version"]), info["version"]
    assert info["hostname"] and info["broadcast_address"]
    assert 0 < info["start_time"] <= time.time() + 1


def test_info_default_limits(api: httpx.Client) -> None:
    """Durations are Go time.Duration values: integer nanoseconds (default flags)."""
    info = expect_json(api.get("/info"))
    assert info["max_heartbeat_interval"] == 60_000_000_000
    assert info["max_output_buffer_size"] == 65536
    assert info["max_output_buffer_timeout"] == 30_000_000_000
    assert info["max_deflate_level"] == 6


def test_info_ports_are_the_listeners(
    api: httpx.Client, nsqd_tcp: tuple[str, int], nsqd_http: tuple[str, int]
) -> None:
    info = expect_json(api.get("/info"))
    assert (info["tcp_port"], info["http_port"]) == (nsqd_tcp[1], nsqd_http[1])


def test_info_agrees_with_stats(api: httpx.Client) -> None:
    info = expect_json(api.get("/info"))
    top = stats(api, topic="no_such_topic_for_info")
    assert (top["version"], top["start_time"]) == (info["version"], info["start_time"])


# -- routing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/bogus"),
        ("POST", "/bogus"),
        ("GET", "/topic"),
        ("POST", "/topic/bogus"),
        ("POST", "/channel/bogus"),
        ("GET", "/stats/extra"),
        ("POST", "/pub/extra"),
        ("GET", "/config/log_level/extra"),
    ],
)
def test_unknown_route_is_404(api: httpx.Client, method: str, path: str) -> None:
    expect_error(api.request(method, path), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/pub"),
        ("PUT", "/pub"),
        ("GET", "/mpub"),
        ("POST", "/ping"),
        ("POST", "/info"),
        ("POST", "/stats"),
        ("DELETE", "/stats"),
        ("GET", "/topic/create"),
        ("GET", "/topic/delete"),
        ("PUT", "/topic/pause"),
        ("GET", "/channel/create"),
        ("GET", "/channel/unpause"),
        ("POST", "/config/log_level"),
        ("DELETE", "/config/log_level"),
    ],
)
def test_wrong_method_is_405(api: httpx.Client, method: str, path: str) -> None:
    expect_error(api.request(method, path), 405, "METHOD_NOT_ALLOWED")


# -- the V1 format and Accept negotiation ---------------------------------------------------


def _same(plain: httpx.Response, v1: httpx.Response) -> None:
    assert plain.status_code == v1.status_code
    assert plain.content == v1.content
    for header in ("content-type", V1_HEADER):
        assert plain.headers.get(header) == v1.headers.get(header), header


def test_accept_header_changes_nothing(api: httpx.Client, topic: str) -> None:
    """nsqd ≥1.0 always answers V1 (the bare value, never the old
    ``{"status_code":..,"status_txt":..,"data":..}`` envelope), with or without
    ``Accept: application/vnd.nsq; version=1.0``."""
    plain = api.get("/info")
    v1 = api.get("/info", headers=ACCEPT_V1)
    _same(plain, v1)
    info = expect_json(v1)
    assert "version" in info and "data" not in info and "status_code" not in info

    params = {"format": "json", "topic": topic, "include_clients": "false"}
    params["include_mem"] = "false"
    _same(api.get("/stats", params=params), api.get("/stats", params=params, headers=ACCEPT_V1))

    expect_text(api.post("/pub", params={"topic": topic}, content=b"a"), "OK")
    expect_text(api.post("/pub", params={"topic": topic}, content=b"b", headers=ACCEPT_V1), "OK")
    expect_empty(api.post("/topic/create", params={"topic": topic}, headers=ACCEPT_V1))
    expect_error(api.post("/pub", content=b"x", headers=ACCEPT_V1), 400, "MISSING_ARG_TOPIC")
    expect_error(api.get("/bogus", headers=ACCEPT_V1), 404, "NOT_FOUND")


def test_json_is_compact(api: httpx.Client, topic: str) -> None:
    """Go's encoding/json: no spaces, no trailing newline."""
    api.post("/topic/create", params={"topic": topic})
    response = api.get("/stats", params={"format": "json", "topic": topic, "include_mem": "0"})
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON_TYPE
    assert response.content.startswith(b'{"version":"')
    assert b'"topics":[{"topic_name":"' + topic.encode() + b'","channels":[],' in response.content
    assert not response.content.endswith(b"\n")


# -- connections --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/mpub", b"rejected before the body is read", 400),
        ("POST", "/mpub?topic=bad!topic", b"x\ny\n", 400),
        ("POST", "/topic/create", b"ignored body", 400),
        ("POST", "/channel/create?topic=t", b"x" * 100_000, 400),
        ("POST", "/bogus", b"nobody reads this", 404),
        ("GET", "/pub", b"nor this", 405),
        ("POST", "/topic/create?topic=conf_t_huge_ignored_body", b"x" * 1_000_000, 200),
    ],
)
def test_keep_alive_survives_unread_bodies(
    nsqd_http: tuple[str, int], method: str, path: str, body: bytes, status: int
) -> None:
    """Whatever a route leaves of the request body unread, the next request (on the same
    keep-alive connection, or a new one if nsqd closed it) is answered."""
    host, port = nsqd_http
    with httpx.Client(base_url=f"http://{host}:{port}", timeout=3.0, trust_env=False) as client:
        try:
            for _ in range(10):
                assert client.request(method, path, content=body).status_code == status
                assert client.get("/ping").status_code == 200
        finally:
            client.post("/topic/delete", params={"topic": "conf_t_huge_ignored_body"})


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET /ping HTTP/1.1\r\nHost: nsqd\r\nConnection: close\r\n\r\n",
        b"GET /info HTTP/1.0\r\n\r\n",
        b"GET /bogus HTTP/1.1\r\nHost: nsqd\r\nConnection: close\r\n\r\n",
        b"POST /pub HTTP/1.1\r\nHost: nsqd\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
    ],
)
def test_connection_close_is_honoured(nsqd_http: tuple[str, int], request_head: bytes) -> None:
    """Asked to (or by an HTTP/1.0 request), nsqd closes the connection after answering."""
    reply = raw_until_closed(nsqd_http, request_head)
    assert reply.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), reply
    assert reply.count(b"HTTP/1.") == 1, reply


def test_unread_oversized_body_closes_the_connection(
    nsqd_http: tuple[str, int], topic: str
) -> None:
    """A body declared too big is answered without being read (Go's net/http then closes
    the connection rather than read megabytes nobody wants)."""
    head = f"POST /pub?topic={topic} HTTP/1.1\r\nHost: nsqd\r\nContent-Length: 2000000\r\n\r\n"
    reply = raw_until_closed(nsqd_http, head.encode())
    assert reply.startswith(b"HTTP/1.1 413 "), reply
    assert reply.endswith(b'{"message":"MSG_TOO_BIG"}'), reply


# -- query parameters ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["x=%zz", "x=1;y=2"])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/stats", b""),
        ("POST", "/pub", b"msg"),
        ("POST", "/mpub", b"msg"),
        ("POST", "/topic/create", b""),
        ("POST", "/topic/delete", b""),
        ("POST", "/topic/empty", b""),
        ("POST", "/topic/pause", b""),
        ("POST", "/channel/create", b""),
        ("POST", "/channel/pause", b""),
    ],
)
def test_malformed_query_is_invalid_request(
    api: httpx.Client, topic: str, method: str, path: str, body: bytes, bad: str
) -> None:
    """Go's url.ParseQuery fails on a bad %-escape and (Go ≥1.17) on a ``;``."""
    url = f"{path}?topic={topic}&channel=c&format=json&{bad}"
    expect_error(api.request(method, url, content=body), 400, "INVALID_REQUEST")
    assert topic_stats(api, topic) is None


def test_parameters_come_from_the_query_string_only(api: httpx.Client, topic: str) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = f"topic={topic}".encode()
    expect_error(api.post("/topic/create", content=body, headers=form), 400, "MISSING_ARG_TOPIC")
    assert topic_stats(api, topic) is None


def test_query_values_are_unescaped(api: httpx.Client, topic: str) -> None:
    """``%2E`` and friends decode before the name is checked."""
    escaped = topic.replace("_", "%5F")
    assert escaped != topic
    expect_empty(api.post(f"/topic/create?topic={escaped}"))
    assert topic_stats(api, topic) is not None


# -- /config ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opt", "value"),
    [
        ("mem_queue_size", 10000),
        ("max_msg_size", MAX_MSG_SIZE),
        ("max_body_size", 5_242_880),
        ("max_rdy_count", 2500),
        ("msg_timeout", 60_000_000_000),
        ("max_req_timeout", 3_600_000_000_000),
        ("max_heartbeat_interval", 60_000_000_000),
        ("nsqlookupd_tcp_addresses", []),
    ],
)
def test_config_get_default(api: httpx.Client, opt: str, value: object) -> None:
    """Options by their config-file name, durations as nanoseconds (default flags)."""
    got = expect_json(api.get(f"/config/{opt}"))
    assert got == value and type(got) is type(value), got


@pytest.mark.parametrize("opt", ["bogus", "mem-queue-size", "MemQueueSize", "topology-zone"])
def test_config_get_unknown_option(api: httpx.Client, opt: str) -> None:
    expect_error(api.get(f"/config/{opt}"), 400, "INVALID_OPTION")


def test_config_put_lookupd_addresses_round_trip(api: httpx.Client) -> None:
    """PUT answers the new value; putting back the current one changes nothing."""
    current = expect_json(api.get("/config/nsqlookupd_tcp_addresses"))
    assert isinstance(current, list)
    content = httpx.Request("PUT", "/", json=current).content
    assert expect_json(api.put("/config/nsqlookupd_tcp_addresses", content=content)) == current
    assert expect_json(api.get("/config/nsqlookupd_tcp_addresses")) == current


LOG_LEVELS = {1: "debug", 2: "info", 3: "warn", 4: "error", 5: "fatal"}


def test_config_put_log_level_round_trip(api: httpx.Client) -> None:
    """The level reads back as Go's lg.LogLevel integer; names are case-insensitive."""
    current = expect_json(api.get("/config/log_level"))
    assert current in LOG_LEVELS, current
    name = LOG_LEVELS[current].upper()
    assert expect_json(api.put("/config/log_level", content=name.encode())) == current
    assert expect_json(api.get("/config/log_level")) == current


@pytest.mark.parametrize(
    ("opt", "body"),
    [
        ("nsqlookupd_tcp_addresses", b"not json"),
        ("nsqlookupd_tcp_addresses", b'"127.0.0.1:4160"'),
        ("nsqlookupd_tcp_addresses", b"[4160]"),
        ("log_level", b"verbose"),
    ],
)
def test_config_put_invalid_value(api: httpx.Client, opt: str, body: bytes) -> None:
    before = expect_json(api.get(f"/config/{opt}"))
    expect_error(api.put(f"/config/{opt}", content=body), 400, "INVALID_VALUE")
    assert expect_json(api.get(f"/config/{opt}")) == before


@pytest.mark.parametrize("opt", ["log_level", "bogus"])
def test_config_put_empty_or_too_big_body(api: httpx.Client, opt: str) -> None:
    """The body is checked (413 INVALID_VALUE) before the option name."""
    expect_error(api.put(f"/config/{opt}", content=b""), 413, "INVALID_VALUE")
    big = b"x" * (MAX_MSG_SIZE + 1)
    expect_error(api.put(f"/config/{opt}", content=big), 413, "INVALID_VALUE")


@pytest.mark.parametrize("opt", ["mem_queue_size", "msg_timeout", "bogus"])
def test_config_put_option_not_settable(api: httpx.Client, opt: str) -> None:
    expect_error(api.put(f"/config/{opt}", content=b"5"), 400, "INVALID_OPTION")
