"""nsqlookupd's registration DB as nsqd drives it over TCP and clients read it over HTTP:
REGISTER / UNREGISTER / disconnect seen in /lookup, /topics, /channels, /nodes and /debug,
tombstones, and HTTP deletes of keys that live producers hold (docs/protocol.md §6.1-§6.3; Go's
nsqlookupd/lookup_protocol_v1.go, registration_db.go and http.go).

Needs both nsqlookupd addresses. Every producer IDENTIFYs with a unique
``broadcast_address`` (so its node ``broadcast_address:http_port`` is its own) and is found
in the shared daemon's lists by it. ``remote_address`` is checked against the test's own
socket address, which assumes no NAT between the test and nsqlookupd. Nothing here waits for
the inactive-producer timeout (300 s) or the tombstone lifetime (45 s).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from .conftest import LookupdConnect, NewTopic
from .lookupd_conn import LookupdConn, peer_info
from .nsq_http import eventually, expect_empty, expect_error, expect_json

#: A producer in /lookup is Go's PeerInfo (registration_db.go:22-33) ...
PEER_FIELDS = (
    "remote_address",
    "hostname",
    "broadcast_address",
    "tcp_port",
    "http_port",
    "version",
)
#: ... and after 1.3.0 also these (allowed, not required; then equal to what was sent).
POST_130_FIELDS = ("topology_zone", "topology_region")


@pytest.fixture(autouse=True)
def _needs_http(lookupd_http: tuple[str, int], lookupd_tcp: tuple[str, int]) -> None:
    """Every test here needs both addresses (skipped otherwise)."""


# -- helpers ------------------------------------------------------------------------------


def expected_peer(conn: LookupdConn) -> dict[str, Any]:
    """What /lookup should show for the producer behind `conn` (in Go's field order)."""
    assert conn.peer is not None
    values = {
        "remote_address": conn.remote_address,
        "hostname": conn.peer.get("hostname", ""),
        "broadcast_address": conn.peer["broadcast_address"],
        "tcp_port": conn.peer["tcp_port"],
        "http_port": conn.peer["http_port"],
        "version": conn.peer["version"],
    }
    return {name: values[name] for name in PEER_FIELDS}


def _drop_post_130(entry: dict[str, Any], conn: LookupdConn) -> dict[str, Any]:
    assert conn.peer is not None
    entry = dict(entry)
    for name in POST_130_FIELDS:
        if name in entry:
            assert entry.pop(name) == conn.peer.get(name, ""), (name, entry)
    return entry


def lookup(api: httpx.Client, topic: str) -> dict[str, Any]:
    value = expect_json(api.get("/lookup", params={"topic": topic}))
    assert set(value) == {"channels", "producers"}, value
    return value


def producers_of(api: httpx.Client, topic: str, *conns: LookupdConn) -> list[dict[str, Any]]:
    """The /lookup producers of `topic` that belong to `conns` (other tests' producers are
    ignored), post-1.3.0 fields checked and dropped, sorted by remote address."""
    mine = {c.peer["broadcast_address"]: c for c in conns if c.peer is not None}
    found = []
    for entry in lookup(api, topic)["producers"]:
        conn = mine.get(entry.get("broadcast_address"))
        if conn is not None:
            found.append(_drop_post_130(entry, conn))
    return sorted(found, key=lambda e: e["remote_address"])


def expect_producers(api: httpx.Client, topic: str, *conns: LookupdConn) -> None:
    """/lookup of `topic` shows exactly the producers behind `conns` (of those given)."""
    want = sorted((expected_peer(c) for c in conns), key=lambda e: e["remote_address"])
    assert producers_of(api, topic, *conns) == want


def topics(api: httpx.Client) -> list[str]:
    value: list[str] = expect_json(api.get("/topics"))["topics"]
    return value


def channels(api: httpx.Client, topic: str) -> list[str]:
    value: list[str] = expect_json(api.get("/channels", params={"topic": topic}))["channels"]
    return value


def node_of(api: httpx.Client, conn: LookupdConn) -> dict[str, Any] | None:
    """The /nodes entry of `conn`'s producer (None when not listed)."""
    assert conn.peer is not None
    nodes = expect_json(api.get("/nodes"))["producers"]
    mine = [n for n in nodes if n["broadcast_address"] == conn.peer["broadcast_address"]]
    assert len(mine) <= 1, mine
    return _drop_post_130(mine[0], conn) if mine else None


def node_topics(api: httpx.Client, conn: LookupdConn) -> dict[str, bool]:
    """topic -> tombstoned, from `conn`'s /nodes entry (``tombstones[i]`` is for
    ``topics[i]``, http.go:270-302)."""
    node = node_of(api, conn)
    assert node is not None, "producer not in /nodes"
    assert len(node["topics"]) == len(node["tombstones"]), node
    assert len(set(node["topics"])) == len(node["topics"]), node
    return dict(zip(node["topics"], node["tombstones"], strict=True))


def debug_entries(api: httpx.Client, key: str, conn: LookupdConn) -> list[dict[str, Any]]:
    """`conn`'s entries under one /debug key (``category:key:subkey``)."""
    data = expect_json(api.get("/debug"))
    return [e for e in data.get(key, []) if e.get("id") == conn.remote_address]


def tombstone(api: httpx.Client, topic: str, conn: LookupdConn) -> None:
    assert conn.peer is not None
    node = f"{conn.peer['broadcast_address']}:{conn.peer['http_port']}"
    expect_empty(api.post("/topic/tombstone", params={"topic": topic, "node": node}))


# -- REGISTER shows up over HTTP ----------------------------------------------------------


def test_register_topic_and_channel(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic, channel)
    found = lookup(lookupd_api, topic)
    assert found["channels"] == [channel]
    assert [_drop_post_130(p, conn) for p in found["producers"]] == [expected_peer(conn)]
    assert topic in topics(lookupd_api)
    assert channels(lookupd_api, topic) == [channel]


def test_register_topic_only(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic)
    assert lookup(lookupd_api, topic)["channels"] == []
    expect_producers(lookupd_api, topic, conn)
    assert channels(lookupd_api, topic) == []


def test_lookup_json_is_compact_in_go_field_order(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """Map keys sorted, PeerInfo fields in struct order, no spaces."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic, "c")
    peer = json.dumps(expected_peer(conn), separators=(",", ":"))
    post_130 = peer[:-1] + ',"topology_zone":"","topology_region":""}'
    body = lookupd_api.get("/lookup", params={"topic": topic}).content.decode()
    assert body in (
        f'{{"channels":["c"],"producers":[{peer}]}}',
        f'{{"channels":["c"],"producers":[{post_130}]}}',
    ), body


def test_registering_again_changes_nothing(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    topic = new_topic()
    conn = lookupd_producer()
    for _ in range(3):
        conn.register(topic, channel)
        conn.register(topic)
    assert lookup(lookupd_api, topic)["channels"] == [channel]
    expect_producers(lookupd_api, topic, conn)
    assert list(node_topics(lookupd_api, conn)) == [topic]


def test_two_producers_of_one_topic(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    first, second = lookupd_producer(), lookupd_producer(hostname="")
    first.register(topic, "a")
    second.register(topic, "b")
    second.register(topic, "a")
    assert first.remote_address != second.remote_address
    expect_producers(lookupd_api, topic, first, second)
    assert sorted(lookup(lookupd_api, topic)["channels"]) == ["a", "b"]


def test_identify_fields_as_sent(
    lookupd_connect: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """A missing hostname is ``""``; unknown keys are ignored; topology fields (post
    1.3.0), when shown, are what was sent."""
    topic = new_topic()
    conns = []
    for info in (
        peer_info(hostname=None),
        peer_info(topology_zone="zone-a", topology_region="region-1", other=[1]),
        peer_info(tcp_port=1, http_port=65535, version="0.1"),
        peer_info(remote_address="192.0.2.1:1"),  # overwritten with the real one
    ):
        if info["hostname"] is None:
            del info["hostname"]
        conn = lookupd_connect()
        conn.identify_as(info)
        conn.register(topic)
        conns.append(conn)
    expect_producers(lookupd_api, topic, *conns)


@pytest.mark.parametrize("bad", [{"version": ""}, {"tcp_port": "4150"}])
def test_failed_identify_registers_nothing(
    lookupd_connect: LookupdConnect, lookupd_api: httpx.Client, bad: dict[str, Any]
) -> None:
    """The peer is added to the DB only once its IDENTIFY is valid (v1.go:219-241)."""
    info = peer_info(**bad)
    conn = lookupd_connect()
    conn.send_identify(info)
    conn.expect_fatal("E_BAD_BODY")
    conn.peer = info
    assert node_of(lookupd_api, conn) is None
    assert debug_entries(lookupd_api, "client::", conn) == []


def test_identify_keys_match_case_insensitively(
    lookupd_connect: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """Go's encoding/json matches object keys to field tags case-insensitively."""
    topic = new_topic()
    info = peer_info()
    shouted = {key.upper(): value for key, value in info.items()}
    conn = lookupd_connect()
    conn.send_identify(shouted)
    conn.expect_json()
    conn.peer = info
    conn.register(topic)
    expect_producers(lookupd_api, topic, conn)


def test_identify_reply_version_is_the_info_version(
    lookupd_connect: LookupdConnect, lookupd_api: httpx.Client
) -> None:
    reply = lookupd_connect().identify_as(peer_info())
    assert reply["version"] == expect_json(lookupd_api.get("/info"))["version"]


def test_empty_channel_param_registers_the_topic_only(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """``REGISTER t  c`` splits to ``[t, "", c]``: the channel parameter is ``""``, so only
    the topic is registered (v1.go:108-111, 135)."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.send(f"REGISTER {topic}  c\n".encode())
    conn.expect_response(b"OK")
    assert lookup(lookupd_api, topic)["channels"] == []
    expect_producers(lookupd_api, topic, conn)


# -- UNREGISTER ---------------------------------------------------------------------------


def test_unregister_channel_keeps_the_channel_key(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    """The producer leaves the channel's key but stays a producer of the topic; the key
    stays (registration_db.go:102)."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic, channel)
    assert debug_entries(lookupd_api, f"channel:{topic}:{channel}", conn)
    conn.unregister(topic, channel)
    assert debug_entries(lookupd_api, f"channel:{topic}:{channel}", conn) == []
    assert debug_entries(lookupd_api, f"topic:{topic}:", conn)
    assert lookup(lookupd_api, topic)["channels"] == [channel]
    expect_producers(lookupd_api, topic, conn)
    assert channels(lookupd_api, topic) == [channel]


def test_unregister_ephemeral_channel_deletes_the_key_when_empty(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    topic, ephemeral = new_topic(), f"{channel}#ephemeral"
    first, second = lookupd_producer(), lookupd_producer()
    first.register(topic, ephemeral)
    second.register(topic, ephemeral)
    first.register(topic, channel)
    first.unregister(topic, ephemeral)
    assert sorted(channels(lookupd_api, topic)) == [channel, ephemeral]
    second.unregister(topic, ephemeral)
    assert channels(lookupd_api, topic) == [channel]
    assert lookup(lookupd_api, topic)["channels"] == [channel]
    expect_producers(lookupd_api, topic, first, second)


def test_unregister_ephemeral_channel_never_registered_deletes_empty_key(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """An ephemeral channel key made over HTTP has no producers: any UNREGISTER of it
    leaves it empty, so it is deleted (v1.go:163-171)."""
    topic = new_topic()
    params = {"topic": topic, "channel": "c#ephemeral"}
    expect_empty(lookupd_api.post("/channel/create", params=params))
    conn = lookupd_producer()
    conn.unregister(topic, "c#ephemeral")
    assert channels(lookupd_api, topic) == []


def test_unregister_topic_leaves_every_key_of_it(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """Without a channel: removed from the topic key and all its channel keys; the keys
    stay (v1.go:172-194)."""
    topic, other = new_topic(), new_topic()
    conn, peer = lookupd_producer(), lookupd_producer()
    conn.register(topic, "c1")
    conn.register(topic, "c2")
    conn.register(other, "c1")
    peer.register(topic, "c1")
    conn.unregister(topic)
    found = lookup(lookupd_api, topic)
    assert sorted(found["channels"]) == ["c1", "c2"]
    expect_producers(lookupd_api, topic, peer)
    assert producers_of(lookupd_api, topic, conn) == []
    expect_producers(lookupd_api, other, conn)
    assert topic in topics(lookupd_api)
    for key in (f"topic:{topic}:", f"channel:{topic}:c1", f"channel:{topic}:c2"):
        assert debug_entries(lookupd_api, key, conn) == [], key
    assert debug_entries(lookupd_api, f"channel:{topic}:c1", peer)
    assert node_topics(lookupd_api, conn) == {other: False}


def test_unregister_ephemeral_topic_deletes_the_topic_key_when_empty(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """Only the topic key goes: a (non-ephemeral) channel key of it stays."""
    topic = new_topic("#ephemeral")
    first, second = lookupd_producer(), lookupd_producer()
    first.register(topic, "c")
    second.register(topic)
    first.unregister(topic)
    expect_producers(lookupd_api, topic, second)
    second.unregister(topic)
    expect_error(lookupd_api.get("/lookup", params={"topic": topic}), 404, "TOPIC_NOT_FOUND")
    assert topic not in topics(lookupd_api)
    assert channels(lookupd_api, topic) == ["c"]


def test_unregister_by_another_producer_changes_nothing(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    topic = new_topic()
    owner, stranger = lookupd_producer(), lookupd_producer()
    owner.register(topic, channel)
    stranger.unregister(topic, channel)
    stranger.unregister(topic)
    expect_producers(lookupd_api, topic, owner)
    assert debug_entries(lookupd_api, f"channel:{topic}:{channel}", owner)


# -- disconnects --------------------------------------------------------------------------


def test_close_removes_the_producer_but_keeps_the_keys(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    """tcp.go/v1.go:76-84: every registration of the peer loses it; keys stay, so the
    topic is still listed and /lookup is 200 with no producers."""
    topic = new_topic()
    conn, peer = lookupd_producer(), lookupd_producer()
    conn.register(topic, channel)
    peer.register(new_topic())
    assert node_of(lookupd_api, conn) is not None
    conn.close()

    def gone() -> None:
        assert producers_of(lookupd_api, topic, conn) == []

    eventually(gone)
    assert lookup(lookupd_api, topic) == {"channels": [channel], "producers": []}
    assert topic in topics(lookupd_api)
    assert channels(lookupd_api, topic) == [channel]
    assert node_of(lookupd_api, conn) is None
    for key in ("client::", f"topic:{topic}:", f"channel:{topic}:{channel}"):
        assert debug_entries(lookupd_api, key, conn) == [], key
    assert node_of(lookupd_api, peer) is not None


def test_close_keeps_ephemeral_keys(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    """A disconnect only removes the producer: unlike UNREGISTER, it deletes no
    ``#ephemeral`` key."""
    topic, ephemeral_channel = new_topic("#ephemeral"), f"{channel}#ephemeral"
    conn = lookupd_producer()
    conn.register(topic, ephemeral_channel)
    conn.close()

    def gone() -> None:
        assert node_of(lookupd_api, conn) is None

    eventually(gone)
    assert lookup(lookupd_api, topic) == {"channels": [ephemeral_channel], "producers": []}
    assert topic in topics(lookupd_api)


def test_fatal_error_removes_the_producer(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic)
    conn.send(b"REGISTER bad!topic\n")
    conn.expect_fatal("E_BAD_TOPIC", "REGISTER topic name 'bad!topic' is not valid")

    def gone() -> None:
        assert producers_of(lookupd_api, topic, conn) == []

    eventually(gone)
    assert lookup(lookupd_api, topic) == {"channels": [], "producers": []}


def test_unidentified_connection_registers_nothing(
    lookupd_connect: LookupdConnect, lookupd_api: httpx.Client
) -> None:
    conn = lookupd_connect()
    conn.ping()
    debug = expect_json(lookupd_api.get("/debug"))
    for key, entries in debug.items():
        assert conn.remote_address not in {e["id"] for e in entries}, key


# -- /nodes -------------------------------------------------------------------------------


def test_nodes_entry(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """http.go:252-308: the producer's fields, then its topics and, aligned, whether it
    is tombstoned in each."""
    t1, t2, t3 = new_topic(), new_topic(), new_topic("#ephemeral")
    conn = lookupd_producer()
    conn.register(t1, "c")
    conn.register(t2)
    conn.register(t3, "c#ephemeral")
    node = node_of(lookupd_api, conn)
    assert node is not None
    fields = {k: v for k, v in node.items() if k not in ("topics", "tombstones")}
    assert fields == expected_peer(conn)
    assert node_topics(lookupd_api, conn) == {t1: False, t2: False, t3: False}


def test_nodes_lists_identified_producers_without_topics(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client
) -> None:
    conn = lookupd_producer()
    node = node_of(lookupd_api, conn)
    assert node is not None
    assert (node["topics"], node["tombstones"]) == ([], [])
    # empty slices, not null: the end of this producer's object in the raw body
    assert conn.peer is not None
    raw = lookupd_api.get("/nodes").content
    start = raw.index(b'"broadcast_address":"' + conn.peer["broadcast_address"].encode())
    assert raw[start : raw.index(b"}", start) + 1].endswith(b'"tombstones":[],"topics":[]}')


def test_nodes_follow_http_deletes(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """/topic/delete removes the key the producer was in, so /nodes drops the topic."""
    kept, deleted = new_topic(), new_topic()
    conn = lookupd_producer()
    conn.register(kept)
    conn.register(deleted, "c")
    expect_empty(lookupd_api.post("/topic/delete", params={"topic": deleted}))
    assert node_topics(lookupd_api, conn) == {kept: False}


# -- tombstones ---------------------------------------------------------------------------


def test_tombstone_hides_the_producer_from_lookup_only(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    """http.go:178-204 and registration_db.go:214-225: hidden from /lookup of that topic
    only, still in /nodes with ``tombstones`` true for that topic."""
    tombstoned, other = new_topic(), new_topic()
    conn = lookupd_producer()
    conn.register(tombstoned, channel)
    conn.register(other, channel)
    tombstone(lookupd_api, tombstoned, conn)
    assert lookup(lookupd_api, tombstoned) == {"channels": [channel], "producers": []}
    expect_producers(lookupd_api, other, conn)
    assert node_topics(lookupd_api, conn) == {tombstoned: True, other: False}
    assert tombstoned in topics(lookupd_api)
    assert channels(lookupd_api, tombstoned) == [channel]


def test_tombstone_leaves_other_producers_visible(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    hidden, visible = lookupd_producer(), lookupd_producer()
    hidden.register(topic)
    visible.register(topic)
    tombstone(lookupd_api, topic, hidden)
    assert producers_of(lookupd_api, topic, hidden, visible) == [expected_peer(visible)]
    assert node_topics(lookupd_api, visible) == {topic: False}


def test_tombstone_matches_broadcast_address_and_http_port_exactly(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    conn = lookupd_producer(tcp_port=4150, http_port=4151)
    conn.register(topic)
    address = conn.peer["broadcast_address"]  # type: ignore[index]
    for node in (
        address,
        f"{address}:4150",
        f"{address}:04151",
        f"{address}:4151 ",
        f"{address.upper()}:4151",
        f"{conn.remote_address}",
        f"{conn.peer['hostname']}:4151",  # type: ignore[index]
    ):
        params = {"topic": topic, "node": node}
        expect_empty(lookupd_api.post("/topic/tombstone", params=params))
    expect_producers(lookupd_api, topic, conn)
    assert node_topics(lookupd_api, conn) == {topic: False}


def test_tombstone_applies_to_every_producer_of_the_node(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """Two connections announcing the same ``broadcast_address:http_port`` are both
    tombstoned; one with another http_port is not."""
    topic = new_topic()
    first = lookupd_producer()
    assert first.peer is not None
    same = lookupd_producer(broadcast_address=first.peer["broadcast_address"])
    other_port = lookupd_producer(broadcast_address=first.peer["broadcast_address"], http_port=5151)
    for conn in (first, same, other_port):
        conn.register(topic)
    tombstone(lookupd_api, topic, first)
    found = [p for p in lookup(lookupd_api, topic)["producers"]]
    mine = [
        _drop_post_130(p, other_port)
        for p in found
        if p["broadcast_address"] == first.peer["broadcast_address"]
    ]
    assert mine == [expected_peer(other_port)]


def test_registering_again_keeps_the_tombstone(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    """Adding a producer already in a key is a no-op (registration_db.go:73-87), so its
    tombstone stays."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic)
    tombstone(lookupd_api, topic, conn)
    conn.register(topic)
    conn.register(topic, channel)
    conn.unregister(topic, channel)
    conn.ping()
    assert producers_of(lookupd_api, topic, conn) == []
    assert node_topics(lookupd_api, conn) == {topic: True}


def test_unregister_then_register_clears_the_tombstone(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """UNREGISTER drops the tombstoned producer entry; REGISTER adds a fresh one."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic)
    tombstone(lookupd_api, topic, conn)
    conn.unregister(topic)
    assert topic not in node_topics(lookupd_api, conn)
    conn.register(topic)
    expect_producers(lookupd_api, topic, conn)
    assert node_topics(lookupd_api, conn) == {topic: False}


def test_a_new_connection_of_a_tombstoned_node_is_visible(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """Tombstones belong to the producer entry of one connection (peer id = remote
    address), not to the node: an nsqd that reconnects is listed again."""
    topic = new_topic()
    old = lookupd_producer()
    assert old.peer is not None
    old.register(topic)
    tombstone(lookupd_api, topic, old)
    new = lookupd_producer(**old.peer)
    new.register(topic)
    assert producers_of(lookupd_api, topic, new) == [expected_peer(new)]


# -- /debug -------------------------------------------------------------------------------

DEBUG_FIELDS = {
    "id": str,
    "hostname": str,
    "broadcast_address": str,
    "tcp_port": int,
    "http_port": int,
    "version": str,
    "last_update": int,
    "tombstoned": bool,
    "tombstoned_at": int,
}


def test_debug_lists_every_registration_of_the_producer(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    """http.go:310-336: ``category:key:subkey`` -> the producers, id = remote address,
    last_update in ns; one peer, so the same last_update everywhere."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic, channel)
    entries = {
        key: debug_entries(lookupd_api, key, conn)
        for key in ("client::", f"topic:{topic}:", f"channel:{topic}:{channel}")
    }
    last_updates = set()
    for key, found in entries.items():
        assert len(found) == 1, (key, found)
        entry = _drop_post_130(found[0], conn)
        assert set(entry) == set(DEBUG_FIELDS), (key, sorted(entry))
        for name, kind in DEBUG_FIELDS.items():
            assert type(entry[name]) is kind, (key, name, entry)
        peer = expected_peer(conn)
        del peer["remote_address"]
        assert {k: entry[k] for k in peer} == peer, key
        assert entry["tombstoned"] is False, key
        last_updates.add(entry["last_update"])
    assert len(last_updates) == 1, last_updates
    assert last_updates.pop() > 1_000_000_000 * 1_000_000_000  # a UnixNano after 2001


def test_debug_shows_the_tombstone(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic, channel)
    tombstone(lookupd_api, topic, conn)
    (topic_entry,) = debug_entries(lookupd_api, f"topic:{topic}:", conn)
    assert topic_entry["tombstoned"] is True
    assert topic_entry["tombstoned_at"] >= topic_entry["last_update"]
    for key in ("client::", f"channel:{topic}:{channel}"):
        (entry,) = debug_entries(lookupd_api, key, conn)
        assert entry["tombstoned"] is False, key


def test_ping_updates_last_update(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    """PING from an identified peer refreshes its liveness (v1.go:263-272)."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic)
    (before,) = debug_entries(lookupd_api, f"topic:{topic}:", conn)
    time.sleep(0.05)
    conn.ping()
    (after,) = debug_entries(lookupd_api, f"topic:{topic}:", conn)
    assert after["last_update"] > before["last_update"]
    (client,) = debug_entries(lookupd_api, "client::", conn)
    assert client["last_update"] == after["last_update"]


# -- HTTP changes to keys that producers hold ----------------------------------------------


def test_topic_delete_drops_live_registrations(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    """/topic/delete removes the keys with their producers; a later REGISTER brings the
    topic back."""
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic, channel)
    expect_empty(lookupd_api.post("/topic/delete", params={"topic": topic}))
    expect_error(lookupd_api.get("/lookup", params={"topic": topic}), 404, "TOPIC_NOT_FOUND")
    assert topic not in topics(lookupd_api)
    assert channels(lookupd_api, topic) == []
    conn.ping()
    conn.register(topic)
    assert lookup(lookupd_api, topic)["channels"] == []
    expect_producers(lookupd_api, topic, conn)


def test_channel_delete_drops_live_registrations(
    lookupd_producer: LookupdConnect,
    lookupd_api: httpx.Client,
    new_topic: NewTopic,
    channel: str,
) -> None:
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic, channel)
    params = {"topic": topic, "channel": channel}
    expect_empty(lookupd_api.post("/channel/delete", params=params))
    assert lookup(lookupd_api, topic)["channels"] == []
    expect_producers(lookupd_api, topic, conn)
    assert debug_entries(lookupd_api, f"channel:{topic}:{channel}", conn) == []
    expect_error(lookupd_api.post("/channel/delete", params=params), 404, "CHANNEL_NOT_FOUND")
    conn.unregister(topic, channel)
    assert channels(lookupd_api, topic) == []


def test_http_creates_keep_live_producers(
    lookupd_producer: LookupdConnect, lookupd_api: httpx.Client, new_topic: NewTopic
) -> None:
    topic = new_topic()
    conn = lookupd_producer()
    conn.register(topic)
    expect_empty(lookupd_api.post("/topic/create", params={"topic": topic}))
    expect_empty(lookupd_api.post("/channel/create", params={"topic": topic, "channel": "c"}))
    assert lookup(lookupd_api, topic)["channels"] == ["c"]
    expect_producers(lookupd_api, topic, conn)
    assert debug_entries(lookupd_api, f"channel:{topic}:c", conn) == []
    conn.register(topic, "c")
    assert debug_entries(lookupd_api, f"channel:{topic}:c", conn)
