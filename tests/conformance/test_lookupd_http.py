"""nsqlookupd's HTTP API on its own: /ping, /info, routing, the V1 response format, query
parsing, and the registration routes driven over HTTP only (/topics, /channels, /lookup,
/nodes, /debug, /topic/*, /channel/*) with their argument errors (docs/protocol.md §6.3; Go's
nsqlookupd/http.go and internal/http_api/).

Producers registered over TCP are covered by test_lookupd_registry.py.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from .conftest import NewTopic
from .nsq_http import (
    ACCEPT_V1,
    JSON_TYPE,
    TEXT_TYPE,
    V1_HEADER,
    expect_empty,
    expect_error,
    expect_json,
    raw_until_closed,
)

# -- helpers ------------------------------------------------------------------------------


def topics(api: httpx.Client) -> list[str]:
    value = expect_json(api.get("/topics"))
    assert set(value) == {"topics"}, value
    assert isinstance(value["topics"], list), value
    return value["topics"]


def channels(api: httpx.Client, topic: str) -> list[str]:
    value = expect_json(api.get("/channels", params={"topic": topic}))
    assert set(value) == {"channels"}, value
    assert isinstance(value["channels"], list), value
    return value["channels"]


def lookup(api: httpx.Client, topic: str) -> dict[str, Any]:
    value = expect_json(api.get("/lookup", params={"topic": topic}))
    assert set(value) == {"channels", "producers"}, value
    return value


def create_channel(api: httpx.Client, topic: str, channel: str) -> None:
    expect_empty(api.post("/channel/create", params={"topic": topic, "channel": channel}))


# -- /ping, /info ---------------------------------------------------------------------------


def test_ping_is_plain_ok(lookupd_api: httpx.Client) -> None:
    response = lookupd_api.get("/ping")
    assert (response.status_code, response.content) == (200, b"OK")
    # PlainText decorator (http.go:33): net/http's sniffed type, no X-NSQ-Content-Type.
    assert response.headers.get("content-type") == TEXT_TYPE
    assert V1_HEADER not in response.headers


def test_info_is_the_version_only(lookupd_api: httpx.Client) -> None:
    response = lookupd_api.get("/info")
    info = expect_json(response)
    assert set(info) == {"version"}, info
    assert re.fullmatch(r"\d+\.\d+\.\d+(-\S+)?", info["version"]), info
    assert response.content == b'{"version":"' + info["version"].encode() + b'"}'


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
        ("GET", "/lookup/extra"),
        ("GET", "/topics/extra"),
        ("GET", "/stats"),
        ("POST", "/pub"),
        ("POST", "/topic/pause"),
    ],
)
def test_unknown_route_is_404(lookupd_api: httpx.Client, method: str, path: str) -> None:
    expect_error(lookupd_api.request(method, path), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/ping"),
        ("POST", "/info"),
        ("POST", "/lookup"),
        ("POST", "/topics"),
        ("PUT", "/topics"),
        ("POST", "/channels"),
        ("POST", "/nodes"),
        ("DELETE", "/nodes"),
        ("POST", "/debug"),
        ("GET", "/topic/create"),
        ("GET", "/topic/delete"),
        ("PUT", "/topic/delete"),
        ("GET", "/topic/tombstone"),
        ("GET", "/channel/create"),
        ("DELETE", "/channel/delete"),
    ],
)
def test_wrong_method_is_405(lookupd_api: httpx.Client, method: str, path: str) -> None:
    expect_error(lookupd_api.request(method, path), 405, "METHOD_NOT_ALLOWED")


def test_accept_header_changes_nothing(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    """Like nsqd ≥1.0, nsqlookupd always answers V1 (never the old
    ``{"status_code","status_txt","data"}`` envelope)."""
    topic = new_topic()
    create_channel(lookupd_api, topic, "c")
    for path, params in [("/lookup", {"topic": topic}), ("/info", {}), ("/bogus", {})]:
        plain = lookupd_api.get(path, params=params)
        v1 = lookupd_api.get(path, params=params, headers=ACCEPT_V1)
        assert (plain.status_code, plain.content) == (v1.status_code, v1.content)
        for header in ("content-type", V1_HEADER):
            assert plain.headers.get(header) == v1.headers.get(header), header
    assert b"status_code" not in lookupd_api.get("/lookup", params={"topic": topic}).content


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET /ping HTTP/1.1\r\nHost: lookupd\r\nConnection: close\r\n\r\n",
        b"GET /topics HTTP/1.0\r\n\r\n",
        b"GET /bogus HTTP/1.1\r\nHost: lookupd\r\nConnection: close\r\n\r\n",
    ],
)
def test_connection_close_is_honoured(lookupd_http: tuple[str, int], request_head: bytes) -> None:
    reply = raw_until_closed(lookupd_http, request_head)
    assert reply.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), reply
    assert reply.count(b"HTTP/1.") == 1, reply


# -- query parameters ---------------------------------------------------------------------

QUERY_ROUTES = [
    ("GET", "/lookup"),
    ("GET", "/channels"),
    ("POST", "/topic/create"),
    ("POST", "/topic/delete"),
    ("POST", "/channel/create"),
    ("POST", "/channel/delete"),
    ("POST", "/topic/tombstone"),
]


@pytest.mark.parametrize("bad", ["x=%zz", "x=1;y=2"])
@pytest.mark.parametrize(("method", "path"), QUERY_ROUTES)
def test_malformed_query_is_invalid_request(
    lookupd_api: httpx.Client, new_topic: NewTopic, method: str, path: str, bad: str
) -> None:
    """Go's url.ParseQuery fails on a bad %-escape and (Go ≥1.17) on a ``;``."""
    topic = new_topic()
    url = f"{path}?topic={topic}&channel=c&node=n:1&{bad}"
    expect_error(lookupd_api.request(method, url), 400, "INVALID_REQUEST")
    assert topic not in topics(lookupd_api)


@pytest.mark.parametrize("path", ["/topics", "/nodes", "/info", "/debug"])
def test_routes_without_params_ignore_the_query(lookupd_api: httpx.Client, path: str) -> None:
    expect_json(lookupd_api.get(f"{path}?x=%zz;y"))


def test_parameters_come_from_the_query_string_only(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = f"topic={topic}&channel=c".encode()
    for path in ("/topic/create", "/channel/create"):
        response = lookupd_api.post(path, content=body, headers=form)
        expect_error(response, 400, "MISSING_ARG_TOPIC")
    assert topic not in topics(lookupd_api)


def test_first_of_repeated_parameters_wins(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic = new_topic()
    expect_empty(lookupd_api.post(f"/topic/create?topic={topic}&topic=bad!name"))
    assert topic in topics(lookupd_api)
    response = lookupd_api.post(f"/topic/create?topic=bad!name&topic={new_topic()}")
    expect_error(response, 400, "INVALID_ARG_TOPIC")


def test_query_values_are_unescaped(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic = new_topic()
    escaped = topic.replace("_", "%5F")
    assert escaped != topic
    expect_empty(lookupd_api.post(f"/channel/create?topic={escaped}&channel=c%2Ed"))
    assert channels(lookupd_api, topic) == ["c.d"]
    assert lookup(lookupd_api, topic) == {"channels": ["c.d"], "producers": []}


# -- /topics, /channels, /lookup ----------------------------------------------------------


def test_created_topic_is_listed(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic = new_topic()
    assert topic not in topics(lookupd_api)
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    listed = topics(lookupd_api)
    assert listed.count(topic) == 1
    assert all(isinstance(t, str) for t in listed)


def test_channels_of_unknown_topic_is_an_empty_list(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """No 404 and no name check: ``[]``, never ``null``."""
    for topic in (new_topic(), "bad!name", ""):
        response = lookupd_api.get("/channels", params={"topic": topic})
        expect_json(response)
        assert response.content == b'{"channels":[]}'


def test_channels_lists_the_topic_channels(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic, other = new_topic(), new_topic()
    for channel in ("c1", "c2", "c3#ephemeral"):
        create_channel(lookupd_api, topic, channel)
    create_channel(lookupd_api, other, "elsewhere")
    assert sorted(channels(lookupd_api, topic)) == ["c1", "c2", "c3#ephemeral"]
    assert channels(lookupd_api, other) == ["elsewhere"]


@pytest.mark.parametrize("path", ["/lookup", "/channels"])
def test_missing_topic(lookupd_api: httpx.Client, path: str) -> None:
    expect_error(lookupd_api.get(path), 400, "MISSING_ARG_TOPIC")
    expect_error(lookupd_api.get(path, params={"channel": "c"}), 400, "MISSING_ARG_TOPIC")


def test_lookup_of_unknown_topic_is_404(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    """Only an absent topic key is TOPIC_NOT_FOUND; names are not checked."""
    for topic in (new_topic(), "bad!name", ""):
        response = lookupd_api.get("/lookup", params={"topic": topic})
        expect_error(response, 404, "TOPIC_NOT_FOUND")


def test_lookup_of_created_topic_has_empty_lists(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    response = lookupd_api.get("/lookup", params={"topic": topic})
    assert expect_json(response) == {"channels": [], "producers": []}
    assert response.content == b'{"channels":[],"producers":[]}'


def test_lookup_lists_created_channels(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic = new_topic()
    create_channel(lookupd_api, topic, "one")
    create_channel(lookupd_api, topic, "two#ephemeral")
    found = lookup(lookupd_api, topic)
    assert sorted(found["channels"]) == ["one", "two#ephemeral"]
    assert found["producers"] == []


def test_wildcard_topic_matches_every_topic(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    """A Go quirk: ``*`` is the registration DB's wildcard (registration_db.go:114-136)
    and /lookup and /channels do not check names, so ``topic=*`` matches every topic."""
    topic = new_topic()
    create_channel(lookupd_api, topic, "wild")
    assert "wild" in channels(lookupd_api, "*")
    assert "wild" in lookup(lookupd_api, "*")["channels"]


# -- /topic/create, /topic/delete ---------------------------------------------------------


def test_topic_create_missing_topic(lookupd_api: httpx.Client) -> None:
    expect_error(lookupd_api.post("/topic/create"), 400, "MISSING_ARG_TOPIC")


@pytest.mark.parametrize("name", ["", "bad!name", "a" * 65, "#ephemeral", "x#ephemeral#y", "*"])
def test_topic_create_invalid_topic(lookupd_api: httpx.Client, name: str) -> None:
    response = lookupd_api.post("/topic/create", params={"topic": name})
    expect_error(response, 400, "INVALID_ARG_TOPIC")


def test_topic_create_is_idempotent(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic = new_topic()
    create_channel(lookupd_api, topic, "kept")
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    assert topics(lookupd_api).count(topic) == 1
    assert lookup(lookupd_api, topic)["channels"] == ["kept"]


def test_topic_create_ephemeral_and_longest_names(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    ephemeral, longest = new_topic("#ephemeral"), new_topic("x" * 24)
    assert len(longest) == 64
    for topic in (ephemeral, longest):
        expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
        assert topic in topics(lookupd_api)


def test_topic_delete_missing_topic(lookupd_api: httpx.Client) -> None:
    expect_error(lookupd_api.post("/topic/delete"), 400, "MISSING_ARG_TOPIC")


def test_topic_delete_unknown_or_invalid_is_ok(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """No existence check and no name check (http.go:152-176)."""
    for name in (new_topic(), "bad!name", ""):
        expect_empty(lookupd_api.post("/topic/delete", params={"topic": name}))


def test_topic_delete_removes_topic_and_channels(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic, other = new_topic(), new_topic()
    create_channel(lookupd_api, topic, "c1")
    create_channel(lookupd_api, topic, "c2")
    create_channel(lookupd_api, other, "c1")
    expect_empty(lookupd_api.post("/topic/delete", params={"topic": topic}))
    assert topic not in topics(lookupd_api)
    expect_error(lookupd_api.get("/lookup", params={"topic": topic}), 404, "TOPIC_NOT_FOUND")
    assert channels(lookupd_api, topic) == []
    # recreating the topic does not bring the channels back; other topics are untouched
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    assert lookup(lookupd_api, topic) == {"channels": [], "producers": []}
    assert lookup(lookupd_api, other)["channels"] == ["c1"]


# -- /channel/create, /channel/delete -----------------------------------------------------

CHANNEL_ARG_ERRORS = [
    ({}, "MISSING_ARG_TOPIC"),
    ({"channel": "c"}, "MISSING_ARG_TOPIC"),
    ({"topic": "bad!name"}, "INVALID_ARG_TOPIC"),
    ({"topic": "", "channel": "c"}, "INVALID_ARG_TOPIC"),
    ({"topic": "bad!name", "channel": "bad!name"}, "INVALID_ARG_TOPIC"),
    ({"topic": "conf_lt_args"}, "MISSING_ARG_CHANNEL"),
    ({"topic": "conf_lt_args", "channel": ""}, "INVALID_ARG_CHANNEL"),
    ({"topic": "conf_lt_args", "channel": "bad!name"}, "INVALID_ARG_CHANNEL"),
    ({"topic": "conf_lt_args", "channel": "c" * 65}, "INVALID_ARG_CHANNEL"),
    ({"topic": "conf_lt_args", "channel": "#ephemeral"}, "INVALID_ARG_CHANNEL"),
]


@pytest.mark.parametrize("path", ["/channel/create", "/channel/delete"])
@pytest.mark.parametrize(("params", "message"), CHANNEL_ARG_ERRORS)
def test_channel_argument_errors(
    lookupd_api: httpx.Client, path: str, params: dict[str, str], message: str
) -> None:
    """http_api.GetTopicChannelArgs: topic missing, topic invalid, channel missing,
    channel invalid, in that order."""
    expect_error(lookupd_api.post(path, params=params), 400, message)
    assert "conf_lt_args" not in topics(lookupd_api)


def test_channel_create_creates_the_topic(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic = new_topic()
    create_channel(lookupd_api, topic, "c")
    create_channel(lookupd_api, topic, "c")
    assert topics(lookupd_api).count(topic) == 1
    assert lookup(lookupd_api, topic) == {"channels": ["c"], "producers": []}


def test_channel_delete_unknown_is_404(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    topic = new_topic()
    params = {"topic": topic, "channel": "c"}
    expect_error(lookupd_api.post("/channel/delete", params=params), 404, "CHANNEL_NOT_FOUND")
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    expect_error(lookupd_api.post("/channel/delete", params=params), 404, "CHANNEL_NOT_FOUND")
    create_channel(lookupd_api, topic, "other")
    expect_error(lookupd_api.post("/channel/delete", params=params), 404, "CHANNEL_NOT_FOUND")


def test_channel_delete_removes_only_that_channel(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    create_channel(lookupd_api, topic, "gone")
    create_channel(lookupd_api, topic, "kept")
    params = {"topic": topic, "channel": "gone"}
    expect_empty(lookupd_api.post("/channel/delete", params=params))
    assert channels(lookupd_api, topic) == ["kept"]
    assert lookup(lookupd_api, topic) == {"channels": ["kept"], "producers": []}
    expect_error(lookupd_api.post("/channel/delete", params=params), 404, "CHANNEL_NOT_FOUND")
    # the topic key stays even when its last channel goes
    expect_empty(lookupd_api.post("/channel/delete", params={"topic": topic, "channel": "kept"}))
    assert lookup(lookupd_api, topic) == {"channels": [], "producers": []}
    assert topic in topics(lookupd_api)


# -- /topic/tombstone ---------------------------------------------------------------------


def test_tombstone_argument_errors(lookupd_api: httpx.Client) -> None:
    """topic is checked before node; values are not checked at all."""
    expect_error(lookupd_api.post("/topic/tombstone"), 400, "MISSING_ARG_TOPIC")
    response = lookupd_api.post("/topic/tombstone", params={"node": "host:4151"})
    expect_error(response, 400, "MISSING_ARG_TOPIC")
    response = lookupd_api.post("/topic/tombstone", params={"topic": "t"})
    expect_error(response, 400, "MISSING_ARG_NODE")


def test_tombstone_of_unknown_topic_or_node_is_ok(
    lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    for params in (
        {"topic": topic, "node": "nowhere.invalid:4151"},
        {"topic": "", "node": ""},
        {"topic": "bad!name", "node": "not a node"},
    ):
        expect_empty(lookupd_api.post("/topic/tombstone", params=params))
    # tombstoning creates nothing
    assert topic not in topics(lookupd_api)
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    params = {"topic": topic, "node": "nowhere.invalid:4151"}
    expect_empty(lookupd_api.post("/topic/tombstone", params=params))
    assert lookup(lookupd_api, topic) == {"channels": [], "producers": []}


# -- /nodes, /debug -----------------------------------------------------------------------

NODE_FIELDS = {
    "remote_address": str,
    "hostname": str,
    "broadcast_address": str,
    "tcp_port": int,
    "http_port": int,
    "version": str,
    "tombstones": list,
    "topics": list,
}
#: Added after 1.3.0 (topology-aware consumption): allowed, not required.
POST_130_FIELDS = {"topology_zone", "topology_region"}


def test_nodes_shape(lookupd_api: httpx.Client) -> None:
    value = expect_json(lookupd_api.get("/nodes"))
    assert set(value) == {"producers"}, value
    assert isinstance(value["producers"], list), value
    for node in value["producers"]:
        assert set(node) - POST_130_FIELDS == set(NODE_FIELDS), sorted(node)
        for name, kind in NODE_FIELDS.items():
            assert type(node[name]) is kind, (name, node)
        assert len(node["tombstones"]) == len(node["topics"]), node


def test_debug_shape(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    """/debug lists the producers of every registration key; keys without producers (such
    as those made over HTTP) do not appear."""
    topic = new_topic()
    create_channel(lookupd_api, topic, "c")
    value = expect_json(lookupd_api.get("/debug"))
    assert isinstance(value, dict)
    assert f"topic:{topic}:" not in value
    assert f"channel:{topic}:c" not in value
    for key, producers in value.items():
        assert key.split(":", 1)[0] in {"client", "topic", "channel"}, key
        assert key.count(":") >= 2, key
        assert isinstance(producers, list) and producers, (key, producers)


def test_json_is_compact(lookupd_api: httpx.Client, new_topic: NewTopic) -> None:
    """Go's encoding/json: no spaces, no trailing newline, map keys sorted."""
    topic = new_topic()
    create_channel(lookupd_api, topic, "c")
    response = lookupd_api.get("/lookup", params={"topic": topic})
    assert response.headers["content-type"] == JSON_TYPE
    assert response.content == b'{"channels":["c"],"producers":[]}'
    response = lookupd_api.get("/channels", params={"topic": topic})
    assert response.content == b'{"channels":["c"]}'
    response = lookupd_api.get("/topics")
    assert response.content.startswith(b'{"topics":["')
    assert not response.content.endswith(b"\n")
