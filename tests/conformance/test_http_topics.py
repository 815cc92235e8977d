"""HTTP topic and channel administration: /topic/{create,delete,empty,pause,unpause} and
/channel/{create,delete,empty,pause,unpause}, their effects on delivery and on /stats, and
every argument error in Go's order of checks (docs/protocol.md §2.5, §4)."""

from __future__ import annotations

import httpx
import pytest

from .conftest import Connect, unique_name
from .nsq_conn import NSQConn
from .nsq_http import (
    channel_stats,
    eventually,
    expect_empty,
    expect_error,
    expect_text,
    stats,
    topic_stats,
)

FRESH_LATENCY = {"count": 0, "percentiles": None}


def _post(api: httpx.Client, path: str, **params: str) -> httpx.Response:
    return api.post(path, params=params)


def _consumer(connect: Connect, topic: str, channel: str, rdy: int = 100) -> NSQConn:
    conn = connect()
    conn.sub(topic, channel)
    conn.rdy(rdy)
    return conn


def _pub(api: httpx.Client, topic: str, body: bytes) -> None:
    expect_text(api.post("/pub", params={"topic": topic}, content=body), "OK")


def _topic(api: httpx.Client, topic: str) -> dict:
    found = topic_stats(api, topic)
    assert found is not None, f"topic {topic} not in /stats"
    return found


# -- /topic/create ------------------------------------------------------------------------


def test_topic_create(api: httpx.Client, topic: str) -> None:
    expect_empty(_post(api, "/topic/create", topic=topic))
    assert _topic(api, topic) == {
        "topic_name": topic,
        "channels": [],
        "depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "message_bytes": 0,
        "paused": False,
        "e2e_processing_latency": FRESH_LATENCY,
    }
    # creating it again is fine and changes nothing
    _pub(api, topic, b"kept")
    expect_empty(_post(api, "/topic/create", topic=topic))
    assert _topic(api, topic)["message_count"] == 1


def test_topic_create_ephemeral(api: httpx.Client) -> None:
    name = unique_name("conf_et") + "#ephemeral"
    expect_empty(_post(api, "/topic/create", topic=name))
    try:
        assert _topic(api, name)["topic_name"] == name
    finally:
        expect_empty(_post(api, "/topic/delete", topic=name))


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({}, 400, "MISSING_ARG_TOPIC"),
        ({"topic": ""}, 400, "INVALID_TOPIC"),
        ({"topic": "bad!topic"}, 400, "INVALID_TOPIC"),
        ({"topic": "a" * 65}, 400, "INVALID_TOPIC"),
    ],
)
def test_topic_create_errors(
    api: httpx.Client, params: dict[str, str], status: int, message: str
) -> None:
    expect_error(_post(api, "/topic/create", **params), status, message)


# -- /topic/delete ------------------------------------------------------------------------


def test_topic_delete(api: httpx.Client, connect: Connect, topic: str, channel: str) -> None:
    consumer = _consumer(connect, topic, channel)
    _pub(api, topic, b"x")
    consumer.read_message()
    expect_empty(_post(api, "/topic/delete", topic=topic))
    # its channels go with it, and their consumers are disconnected
    consumer.expect_closed()
    assert topic_stats(api, topic) is None
    assert topic not in [t["topic_name"] for t in stats(api)["topics"] or ()]
    expect_error(_post(api, "/topic/delete", topic=topic), 404, "TOPIC_NOT_FOUND")


def test_topic_delete_drops_its_messages(api: httpx.Client, topic: str) -> None:
    _pub(api, topic, b"gone")
    expect_empty(_post(api, "/topic/delete", topic=topic))
    expect_empty(_post(api, "/topic/create", topic=topic))
    found = _topic(api, topic)
    assert (found["depth"], found["message_count"]) == (0, 0)


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({}, 400, "MISSING_ARG_TOPIC"),
        # the name is not validated: an invalid one simply does not exist
        ({"topic": ""}, 404, "TOPIC_NOT_FOUND"),
        ({"topic": "bad!topic"}, 404, "TOPIC_NOT_FOUND"),
        ({"topic": "conf_never_created"}, 404, "TOPIC_NOT_FOUND"),
    ],
)
def test_topic_delete_errors(
    api: httpx.Client, params: dict[str, str], status: int, message: str
) -> None:
    expect_error(_post(api, "/topic/delete", **params), status, message)


# -- /topic/empty -------------------------------------------------------------------------


def test_topic_empty(api: httpx.Client, topic: str) -> None:
    for body in (b"a", b"b", b"c"):
        _pub(api, topic, body)
    assert _topic(api, topic)["depth"] == 3
    expect_empty(_post(api, "/topic/empty", topic=topic))
    found = _topic(api, topic)
    # the queue is drained; the counters are not reset
    assert (found["depth"], found["backend_depth"], found["message_count"]) == (0, 0, 3)


def test_topic_empty_leaves_channels_alone(api: httpx.Client, topic: str, channel: str) -> None:
    expect_empty(_post(api, "/topic/create", topic=topic))
    expect_empty(_post(api, "/channel/create", topic=topic, channel=channel))
    _pub(api, topic, b"in the channel")
    eventually(lambda: _expect_depths(api, topic, channel, 0, 1))
    expect_empty(_post(api, "/topic/pause", topic=topic))
    _pub(api, topic, b"in the topic")
    eventually(lambda: _expect_depths(api, topic, channel, 1, 1))
    expect_empty(_post(api, "/topic/empty", topic=topic))
    _expect_depths(api, topic, channel, 0, 1)


def _expect_depths(
    api: httpx.Client, topic: str, channel: str, topic_depth: int, channel_depth: int
) -> None:
    found = _topic(api, topic)
    got = (found["depth"], channel_stats(api, topic, channel)["depth"])
    assert got == (topic_depth, channel_depth), found


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({}, 400, "MISSING_ARG_TOPIC"),
        ({"topic": "bad!topic"}, 400, "INVALID_TOPIC"),
        ({"topic": ""}, 400, "INVALID_TOPIC"),
        ({"topic": "conf_never_created"}, 404, "TOPIC_NOT_FOUND"),
    ],
)
def test_topic_empty_errors(
    api: httpx.Client, params: dict[str, str], status: int, message: str
) -> None:
    expect_error(_post(api, "/topic/empty", **params), status, message)


# -- /topic/pause, /topic/unpause ---------------------------------------------------------


def test_topic_pause_holds_messages_in_the_topic(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = _consumer(connect, topic, channel)
    expect_empty(_post(api, "/topic/pause", topic=topic))
    assert _topic(api, topic)["paused"] is True
    _pub(api, topic, b"held")
    consumer.expect_nothing(0.3)
    found = _topic(api, topic)
    assert found["depth"] == 1
    assert found["channels"][0]["depth"] == 0
    assert found["channels"][0]["paused"] is False

    expect_empty(_post(api, "/topic/unpause", topic=topic))
    assert _topic(api, topic)["paused"] is False
    assert consumer.read_message().body == b"held"


def test_topic_pause_and_unpause_are_idempotent(api: httpx.Client, topic: str) -> None:
    expect_empty(_post(api, "/topic/create", topic=topic))
    for path, paused in [
        ("/topic/pause", True),
        ("/topic/pause", True),
        ("/topic/unpause", False),
        ("/topic/unpause", False),
    ]:
        expect_empty(_post(api, path, topic=topic))
        assert _topic(api, topic)["paused"] is paused


@pytest.mark.parametrize("path", ["/topic/pause", "/topic/unpause"])
@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({}, 400, "MISSING_ARG_TOPIC"),
        ({"topic": "bad!topic"}, 404, "TOPIC_NOT_FOUND"),
        ({"topic": "conf_never_created"}, 404, "TOPIC_NOT_FOUND"),
    ],
)
def test_topic_pause_errors(
    api: httpx.Client, path: str, params: dict[str, str], status: int, message: str
) -> None:
    expect_error(_post(api, path, **params), status, message)


# -- /channel/create ----------------------------------------------------------------------


def test_channel_create(api: httpx.Client, topic: str, channel: str) -> None:
    expect_empty(_post(api, "/topic/create", topic=topic))
    expect_empty(_post(api, "/channel/create", topic=topic, channel=channel))
    assert channel_stats(api, topic, channel) == {
        "channel_name": channel,
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "clients": [],
        "paused": False,
        "e2e_processing_latency": FRESH_LATENCY,
    }
    # messages published now wait in the channel
    _pub(api, topic, b"waiting")

    def queued() -> None:
        found = channel_stats(api, topic, channel)
        assert (found["depth"], found["message_count"]) == (1, 1), found

    eventually(queued)
    # creating it again is fine and changes nothing
    expect_empty(_post(api, "/channel/create", topic=topic, channel=channel))
    assert channel_stats(api, topic, channel)["depth"] == 1


def test_channel_create_ephemeral_stays_without_clients(api: httpx.Client, topic: str) -> None:
    """An ephemeral channel goes away with its last client; one that never had a client
    stays."""
    name = unique_name("eph") + "#ephemeral"
    expect_empty(_post(api, "/topic/create", topic=topic))
    expect_empty(_post(api, "/channel/create", topic=topic, channel=name))
    assert channel_stats(api, topic, name)["channel_name"] == name


CHANNEL_ROUTES = ["/channel/create", "/channel/delete", "/channel/empty"]
CHANNEL_ROUTES += ["/channel/pause", "/channel/unpause"]


@pytest.mark.parametrize("path", CHANNEL_ROUTES)
@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({}, 400, "MISSING_ARG_TOPIC"),
        ({"channel": "c"}, 400, "MISSING_ARG_TOPIC"),
        ({"topic": "bad!topic", "channel": "c"}, 400, "INVALID_ARG_TOPIC"),
        ({"topic": "", "channel": "c"}, 400, "INVALID_ARG_TOPIC"),
        # the arguments are checked before the topic is looked up
        ({"topic": "conf_never_created"}, 400, "MISSING_ARG_CHANNEL"),
        ({"topic": "conf_never_created", "channel": "bad!c"}, 400, "INVALID_ARG_CHANNEL"),
        ({"topic": "conf_never_created", "channel": ""}, 400, "INVALID_ARG_CHANNEL"),
        ({"topic": "conf_never_created", "channel": "c" * 65}, 400, "INVALID_ARG_CHANNEL"),
        ({"topic": "conf_never_created", "channel": "c"}, 404, "TOPIC_NOT_FOUND"),
    ],
)
def test_channel_argument_errors(
    api: httpx.Client, path: str, params: dict[str, str], status: int, message: str
) -> None:
    expect_error(_post(api, path, **params), status, message)


@pytest.mark.parametrize("path", CHANNEL_ROUTES[1:])
def test_channel_not_found(api: httpx.Client, topic: str, channel: str, path: str) -> None:
    expect_empty(_post(api, "/topic/create", topic=topic))
    expect_error(_post(api, path, topic=topic, channel=channel), 404, "CHANNEL_NOT_FOUND")


# -- /channel/delete ----------------------------------------------------------------------


def test_channel_delete(api: httpx.Client, connect: Connect, topic: str, channel: str) -> None:
    other = unique_name("conf_c")
    consumer = _consumer(connect, topic, channel)
    bystander = _consumer(connect, topic, other)
    expect_empty(_post(api, "/channel/delete", topic=topic, channel=channel))
    # its consumers are disconnected; the topic and its other channels stay
    consumer.expect_closed()
    assert [c["channel_name"] for c in _topic(api, topic)["channels"]] == [other]
    _pub(api, topic, b"still flowing")
    assert bystander.read_message().body == b"still flowing"
    expect_error(
        _post(api, "/channel/delete", topic=topic, channel=channel), 404, "CHANNEL_NOT_FOUND"
    )


# -- /channel/empty -----------------------------------------------------------------------


def test_channel_empty_drops_queued_in_flight_and_deferred(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    consumer = _consumer(connect, topic, channel, rdy=1)
    _pub(api, topic, b"in flight")
    msg = consumer.read_message()
    _pub(api, topic, b"queued")
    expect_text(
        api.post("/pub", params={"topic": topic, "defer": "60000"}, content=b"deferred"), "OK"
    )

    def loaded() -> None:
        found = channel_stats(api, topic, channel)
        got = (found["in_flight_count"], found["depth"], found["deferred_count"])
        assert got == (1, 1, 1), found

    eventually(loaded)
    expect_empty(_post(api, "/channel/empty", topic=topic, channel=channel))
    found = channel_stats(api, topic, channel)
    got = (found["in_flight_count"], found["depth"], found["deferred_count"])
    assert got == (0, 0, 0), found
    assert found["clients"][0]["in_flight_count"] == 0
    # the dropped in-flight message can no longer be finished
    consumer.fin(msg.id)
    consumer.expect_error("E_FIN_FAILED", f"FIN {msg.id.decode()} failed ID not in flight")
    # the consumer stays subscribed and gets what comes next
    _pub(api, topic, b"after")
    assert consumer.read_message().body == b"after"


# -- /channel/pause, /channel/unpause -----------------------------------------------------


def test_channel_pause_holds_messages_in_the_channel(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    other = unique_name("conf_c")
    consumer = _consumer(connect, topic, channel)
    bystander = _consumer(connect, topic, other)
    expect_empty(_post(api, "/channel/pause", topic=topic, channel=channel))
    assert channel_stats(api, topic, channel)["paused"] is True
    assert channel_stats(api, topic, other)["paused"] is False
    assert _topic(api, topic)["paused"] is False

    _pub(api, topic, b"held")
    # other channels still deliver
    assert bystander.read_message().body == b"held"
    consumer.expect_nothing(0.3)
    assert channel_stats(api, topic, channel)["depth"] == 1

    expect_empty(_post(api, "/channel/unpause", topic=topic, channel=channel))
    assert channel_stats(api, topic, channel)["paused"] is False
    assert consumer.read_message().body == b"held"


def test_channel_pause_survives_without_clients(
    api: httpx.Client, connect: Connect, topic: str, channel: str
) -> None:
    expect_empty(_post(api, "/topic/create", topic=topic))
    expect_empty(_post(api, "/channel/create", topic=topic, channel=channel))
    expect_empty(_post(api, "/channel/pause", topic=topic, channel=channel))
    _pub(api, topic, b"waits")
    consumer = _consumer(connect, topic, channel)
    consumer.expect_nothing(0.3)
    assert channel_stats(api, topic, channel)["paused"] is True
    expect_empty(_post(api, "/channel/unpause", topic=topic, channel=channel))
    assert consumer.read_message().body == b"waits"
