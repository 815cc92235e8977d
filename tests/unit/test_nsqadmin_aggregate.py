"""Aggregation of lookupd and nsqd answers into nsqadmin's JSON (pure functions, sample data
from two nodes)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trionsq.nsqadmin import aggregate as agg

NOW = 1_700_000_100.7

P1 = agg.lookupd_producer(
    {
        "remote_address": "10.0.0.1:5000",
        "hostname": "bravo",
        "broadcast_address": "10.0.0.1",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
        "topology_zone": "z1",
        "topology_region": "r1",
        "topics": ["t"],
        "tombstones": [False],
    }
)
P2 = agg.lookupd_producer(
    {
        "remote_address": "10.0.0.2:5000",
        "hostname": "alpha",
        "broadcast_address": "10.0.0.2",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.2.1",
        "topics": ["t"],
        "tombstones": [True],
    }
)


def _client(hostname: str, zone: str = "", region: str = "") -> dict[str, Any]:
    return {
        "client_id": hostname,
        "hostname": hostname,
        "version": "V2",
        "remote_address": f"{hostname}:1234",
        "state": 3,
        "ready_count": 5,
        "in_flight_count": 2,
        "message_count": 10,
        "finish_count": 8,
        "requeue_count": 1,
        "connect_ts": 1_700_000_000,
        "sample_rate": 0,
        "deflate": False,
        "snappy": True,
        "user_agent": "test/1.0",
        "topology_zone": zone,
        "topology_region": region,
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
        "pub_counts": [],
    }


def _stats(depth: int, backend: int, messages: int, paused: bool, clients: list[Any]) -> Any:
    return {
        "version": "1.3.0",
        "health": "OK",
        "start_time": 1,
        "topics": [
            {
                "topic_name": "t",
                "depth": depth,
                "backend_depth": backend,
                "message_count": messages,
                "message_bytes": 5 * messages,
                "paused": paused,
                "channels": [
                    {
                        "channel_name": "c",
                        "depth": depth + 1,
                        "backend_depth": backend,
                        "in_flight_count": 2,
                        "deferred_count": 1,
                        "message_count": messages,
                        "requeue_count": 3,
                        "timeout_count": 4,
                        "client_count": len(clients),
                        "clients": clients,
                        "paused": paused,
                        "e2e_processing_latency": {
                            "count": 10,
                            "percentiles": [{"quantile": 0.99, "value": 1000 * messages}],
                        },
                    }
                ],
                "e2e_processing_latency": {"count": 0, "percentiles": None},
            }
        ],
        "producers": [],
    }


S1 = _stats(10, 4, 100, False, [_client("zed", "z9", "r1"), _client("amy", "z1", "r1")])
S2 = _stats(5, 0, 50, True, [_client("bob")])


def _collect(topic: str = "t", channel: str = "") -> tuple[list[Any], dict[str, Any]]:
    answers = [(P1, copy.deepcopy(S1)), (P2, copy.deepcopy(S2))]
    return agg.collect_stats(answers, topic, channel, NOW)


def test_per_node_topic_stats_shape_and_values() -> None:
    topics, _ = _collect()
    assert [t["node"] for t in topics] == ["10.0.0.2:4151", "10.0.0.1:4151"]  # by hostname
    t1 = topics[1]
    assert list(t1) == [
        "node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth",
        "message_count", "delivery_msg_count", "nodes", "channels", "paused",
        "e2e_processing_latency",
    ]  # fmt: skip
    assert t1["hostname"] == "bravo"
    assert (t1["depth"], t1["memory_depth"], t1["backend_depth"]) == (10, 6, 4)
    channel = t1["channels"][0]
    assert channel["node"] == "10.0.0.1:4151" and channel["topic_name"] == "t"
    assert channel["memory_depth"] == 7
    assert "delivery_msg_count" not in channel  # omitempty when 0


def test_client_stats_keys_connected_and_node_topology() -> None:
    topics, _ = _collect()
    client = next(c for c in topics[1]["channels"][0]["clients"] if c["hostname"] == "amy")
    assert list(client)[:8] == [
        "node", "remote_address", "version", "client_id", "hostname", "user_agent",
        "connect_ts", "connected",
    ]  # fmt: skip
    assert client["node"] == "10.0.0.1:4151"
    assert client["connected"] == 100 * 1_000_000_000
    assert client["node_topology_zone"] == "z1" and client["node_topology_region"] == "r1"
    assert client["topology_zone"] == "z1"
    assert "state" not in client and "pub_counts" not in client
    bob = topics[0]["channels"][0]["clients"][0]
    assert "topology_zone" not in bob and "node_topology_zone" not in bob
    assert list(bob)[-5:] == [
        "tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
        "tls_negotiated_protocol_is_mutual",
    ]  # fmt: skip


def test_aggregate_topic_sums_nodes_and_channels() -> None:
    topics, _ = _collect()
    total = agg.aggregate_topic("t", topics)
    assert total["node"] == "*"
    assert total["topic_name"] == "t"
    assert (total["depth"], total["memory_depth"], total["backend_depth"]) == (15, 11, 4)
    assert total["message_count"] == 150
    assert total["paused"] is True  # any node paused
    assert [n["hostname"] for n in total["nodes"]] == ["alpha", "bravo"]
    [channel] = total["channels"]
    assert channel["channel_name"] == "c"
    assert channel["depth"] == 17
    assert channel["in_flight_count"] == 4 and channel["deferred_count"] == 2
    assert channel["requeue_count"] == 6 and channel["timeout_count"] == 8
    assert channel["client_count"] == 3
    assert len(channel["nodes"]) == 2
    assert [c["hostname"] for c in channel["clients"]] == ["amy", "bob", "zed"]


def test_aggregate_of_nothing() -> None:
    total = agg.aggregate_topic("t", [])
    assert total["node"] == "" and total["nodes"] == [] and total["channels"] == []
    assert total["depth"] == 0
    channel = agg.aggregate_channel("t", "c", [])
    assert channel["clients"] == [] and channel["client_count"] == 0


def test_channel_map_keys() -> None:
    _, by_name = _collect()
    assert list(by_name) == ["c"]
    assert by_name["c"]["node"] == "*"
    _, everything = _collect(topic="")
    assert list(everything) == ["t:c"]


def test_e2e_percentiles_aggregate_as_go() -> None:
    _, by_name = _collect()
    e2e = by_name["c"]["e2e_processing_latency"]
    assert e2e["count"] == 20
    assert e2e["host"] == "*" and e2e["topic"] == "t" and e2e["channel"] == "c"
    [p] = e2e["percentiles"]
    assert p["quantile"] == 0.99
    assert p["max"] == 100_000
    assert p["count"] == 20
    # count-weighted running average of 100000 (10 samples) and 50000 (10 samples)
    assert p["average"] == pytest.approx(75_000)
    # Go's "min" is min(this node's max, running max): the last node's value here
    assert p["min"] == 50_000
    node = by_name["c"]["nodes"][0]["e2e_processing_latency"]["percentiles"][0]
    assert node == {
        "average": node["value"],
        "count": 10,
        "max": node["value"],
        "min": node["value"],
        "quantile": 0.99,
        "value": node["value"],
    }


def test_e2e_null_percentiles_are_empty_lists() -> None:
    e2e = agg.e2e_from_nsqd({"count": 0, "percentiles": None})
    assert e2e == {"count": 0, "percentiles": [], "topic": "", "channel": "", "host": ""}
    assert agg.e2e_from_nsqd(None)["percentiles"] == []


def test_counter_stats() -> None:
    _, everything = _collect(topic="")
    stats = agg.counter_stats(everything)
    assert stats == {
        "t:c:10.0.0.1:4151": {
            "node": "10.0.0.1:4151",
            "topic_name": "t",
            "channel_name": "c",
            "message_count": 100,
        },
        "t:c:10.0.0.2:4151": {
            "node": "10.0.0.2:4151",
            "topic_name": "t",
            "channel_name": "c",
            "message_count": 50,
        },
    }


def test_topics_summary() -> None:
    other = {"topics": [{"topic_name": "u", "depth": 1, "backend_depth": 0, "channels": []}]}
    summary = agg.topics_summary(["t", "empty"], [S1, S2, other])
    assert list(summary) == ["empty", "t", "u"]
    assert summary["t"] == {
        "depth": 15,
        "memory_depth": 11,
        "backend_depth": 4,
        "message_count": 150,
        "in_flight_count": 4,
        "deferred_count": 2,
        "channel_depth": 17,
        "channel_count": 1,
        "node_count": 2,
        "paused": True,
    }
    assert summary["empty"]["node_count"] == 0 and summary["empty"]["depth"] == 0
    assert summary["u"]["node_count"] == 1 and summary["u"]["channel_count"] == 0


def test_union_lookupd_producers() -> None:
    raw1 = {
        "remote_address": "10.0.0.1:5000",
        "hostname": "bravo",
        "broadcast_address": "10.0.0.1",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
        "topics": ["z", "a"],
        "tombstones": [False, True],
    }
    raw2 = dict(raw1, hostname="alpha", broadcast_address="10.0.0.2", version="1.2.0")
    raw1_seen_elsewhere = dict(raw1, remote_address="10.0.0.1:6000")
    producers = agg.union_lookupd_producers(
        [("L1:4161", [raw1, raw2]), ("L2:4161", [raw1_seen_elsewhere])]
    )
    assert [p["hostname"] for p in producers] == ["alpha", "bravo"]
    alpha, bravo = producers
    assert bravo["remote_addresses"] == ["L1:4161/10.0.0.1:5000", "L2:4161/10.0.0.1:6000"]
    assert alpha["remote_addresses"] == ["L1:4161/10.0.0.1:5000"]
    assert bravo["topics"] == [
        {"topic": "a", "tombstoned": True},
        {"topic": "z", "tombstoned": False},
    ]
    assert alpha["out_of_date"] is True and bravo["out_of_date"] is False
    assert "topology_zone" not in alpha
    assert list(alpha) == [
        "remote_addresses", "remote_address", "hostname", "broadcast_address", "tcp_port",
        "http_port", "version", "topics", "out_of_date", "unreachable",
    ]  # fmt: skip


def test_union_topic_producers_dedupes_by_http_address() -> None:
    raw = {"broadcast_address": "h", "http_port": 1, "tcp_port": 2, "hostname": "h"}
    producers = agg.union_topic_producers(
        [[raw], [dict(raw, tcp_port=3)], [dict(raw, http_port=9)]]
    )
    assert [agg.producer_http_address(p) for p in producers] == ["h:1", "h:9"]


def test_nsqd_producer_and_unreachable() -> None:
    p = agg.nsqd_producer("1.2.3.4:4151", {"version": "1.3.0", "tcp_port": 4150}, ["a", "b"])
    assert p["broadcast_address"] == "1.2.3.4" and p["http_port"] == 4151
    assert p["hostname"] == "1.2.3.4"
    assert p["topics"] == [
        {"topic": "a", "tombstoned": False},
        {"topic": "b", "tombstoned": False},
    ]
    assert p["remote_addresses"] == [] and p["unreachable"] is False
    dead = agg.unreachable_producer("[::1]:4151")
    assert dead["broadcast_address"] == "::1" and dead["http_port"] == 4151
    assert agg.producer_http_address(dead) == "[::1]:4151"
    assert dead["version"] == "" and dead["unreachable"] is True and dead["topics"] == []


def test_semver_ordering() -> None:
    versions = ["1.3.0", "1.2.10", "1.3.0-alpha", "garbage", "1.10.0", "1.3.0-alpha.2"]
    ordered = sorted(versions, key=agg.parse_semver)
    assert ordered == ["garbage", "1.2.10", "1.3.0-alpha", "1.3.0-alpha.2", "1.3.0", "1.10.0"]


def test_clients_sorted_by_node_then_topology() -> None:
    def c(node: str, zone: str, region: str) -> dict[str, Any]:
        return {
            "node": node,
            "hostname": f"{node}-{zone}-{region}",
            "node_topology_zone": "z1",
            "node_topology_region": "r1",
            "topology_zone": zone,
            "topology_region": region,
        }

    clients = [c("b", "z1", "r1"), c("a", "z9", "r9"), c("a", "z2", "r1"), c("a", "z1", "r1")]
    agg.sort_clients_by_node_topology(clients)
    assert [(x["node"], x["topology_zone"]) for x in clients] == [
        ("a", "z1"),  # same zone and region as its node
        ("a", "z2"),  # same region
        ("a", "z9"),
        ("b", "z1"),
    ]


def test_a_replicated_topic_shows_role_epoch_and_lag() -> None:
    raw = {
        "topic_name": "orders",
        "depth": 0,
        "backend_depth": 0,
        "message_count": 5,
        "channels": [],
        "paused": False,
        "replication": {
            "role": "primary",
            "epoch": 2051,
            "epoch_text": "2.3",
            "primary": "10.0.0.3:4150",
            "members": [
                {"address": "a:4150", "connected": True, "lag_messages": 4},
                {"address": "b:4150", "connected": False, "lag_messages": None},
            ],
            "under_replicated": 0,
            "failovers": 1,
        },
    }
    stats = agg.topic_stats(raw, "n3:4151", {"hostname": "n3"}, 0.0)
    assert stats["replication"] == {
        "role": "primary",
        "epoch": 2051,
        "epoch_text": "2.3",
        "primary": "10.0.0.3:4150",
        "max_lag_messages": 4,
        "members_connected": 1,
        "members": 2,
        "under_replicated": 0,
        "failovers": 1,
    }
    del raw["replication"]
    assert "replication" not in agg.topic_stats(raw, "n3:4151", {"hostname": "n3"}, 0.0)
