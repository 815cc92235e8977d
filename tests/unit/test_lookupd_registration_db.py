"""nsqlookupd's registration DB: keys and producers, wildcard lookups, the peer index, and
liveness / tombstone timing on an injected clock and on Trio's MockClock."""

from __future__ import annotations

import trio

from trionsq.nsqlookupd.registration_db import (
    CLIENT_KEY,
    GO_ZERO_TIME_NS,
    PeerInfo,
    Producer,
    Registration,
    RegistrationDB,
    channel_key,
    topic_key,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = 1_700_000_000_000_000_000

    def __call__(self) -> float:
        return self.now

    def wall_ns(self) -> int:
        return self.wall


def make_db() -> tuple[RegistrationDB, FakeClock]:
    clock = FakeClock()
    return RegistrationDB(clock, clock.wall_ns), clock


def peer(n: int, http_port: int = 4151) -> PeerInfo:
    return PeerInfo(
        f"127.0.0.1:{5000 + n}",
        remote_address=f"127.0.0.1:{5000 + n}",
        broadcast_address=f"nsqd{n}",
        tcp_port=4150,
        http_port=http_port,
        version="1.3.0",
    )


def ids(producers: list[Producer]) -> list[str]:
    return [p.peer_info.id for p in producers]


def test_registration_is_match_with_wildcards() -> None:
    key = channel_key("t", "c")
    assert key == Registration("channel", "t", "c")
    assert key.is_match("channel", "t", "c")
    assert key.is_match("channel", "*", "c")
    assert key.is_match("channel", "t", "*")
    assert key.is_match("channel", "*", "*")
    assert not key.is_match("topic", "*", "*")
    assert not key.is_match("channel", "u", "*")
    assert not key.is_match("channel", "t", "d")


def test_add_producer_creates_the_key_and_is_a_no_op_for_a_registered_peer() -> None:
    db, _ = make_db()
    p1 = peer(1)
    first = Producer(p1)
    assert db.add_producer(topic_key("t"), first) is True
    db.tombstone(first)
    second = Producer(p1)
    assert db.add_producer(topic_key("t"), second) is False
    # the first record, with its tombstone, stays
    assert db.find_producers("topic", "t", "") == [first]
    assert first.tombstoned is True
    assert topic_key("t") in db


def test_remove_producer_keeps_the_key_and_counts_what_is_left() -> None:
    db, _ = make_db()
    db.add_producer(topic_key("t"), Producer(peer(1)))
    db.add_producer(topic_key("t"), Producer(peer(2)))
    assert db.remove_producer(topic_key("t"), peer(1).id) == (True, 1)
    assert db.remove_producer(topic_key("t"), peer(1).id) == (False, 1)
    assert db.remove_producer(topic_key("t"), peer(2).id) == (True, 0)
    assert db.find_registrations("topic", "t", "") == [topic_key("t")]
    assert db.find_producers("topic", "t", "") == []
    assert db.remove_producer(topic_key("missing"), peer(1).id) == (False, 0)
    assert topic_key("missing") not in db


def test_add_registration_adds_an_empty_key_once() -> None:
    db, _ = make_db()
    db.add_registration(topic_key("t"))
    producer = Producer(peer(1))
    db.add_producer(topic_key("t"), producer)
    db.add_registration(topic_key("t"))
    assert db.find_producers("topic", "t", "") == [producer]
    assert len(db) == 1


def test_remove_registration_drops_the_key_its_producers_and_the_indexes() -> None:
    db, _ = make_db()
    p1 = peer(1)
    db.add_producer(channel_key("t", "c"), Producer(p1))
    db.add_producer(topic_key("t"), Producer(p1))
    db.remove_registration(channel_key("t", "c"))
    assert db.find_registrations("channel", "t", "*") == []
    assert db.find_registrations("channel", "*", "*") == []
    assert db.lookup_registrations(p1.id) == [topic_key("t")]
    db.remove_registration(channel_key("t", "c"))  # absent: nothing happens
    assert len(db) == 1


def test_find_registrations_exact_and_wildcards() -> None:
    db, _ = make_db()
    for key in [topic_key("a"), channel_key("a", "x"), channel_key("a", "y"), topic_key("b")]:
        db.add_registration(key)
    db.add_registration(channel_key("b", "x"))
    assert db.find_registrations("topic", "a", "") == [topic_key("a")]
    assert db.find_registrations("topic", "zz", "") == []
    assert db.find_registrations("topic", "*", "") == [topic_key("a"), topic_key("b")]
    assert db.find_registrations("channel", "a", "*") == [
        channel_key("a", "x"),
        channel_key("a", "y"),
    ]
    assert db.find_registrations("channel", "*", "x") == [
        channel_key("a", "x"),
        channel_key("b", "x"),
    ]
    assert db.find_registrations("channel", "*", "*") == [
        channel_key("a", "x"),
        channel_key("a", "y"),
        channel_key("b", "x"),
    ]
    assert db.find_registrations("client", "*", "*") == []
    # a wildcard key with an exact subkey only matches that subkey
    assert db.find_registrations("topic", "*", "x") == []


def test_find_producers_with_a_wildcard_lists_each_peer_once() -> None:
    db, _ = make_db()
    p1, p2 = peer(1), peer(2)
    first = Producer(p1)
    db.add_producer(topic_key("a"), first)
    db.add_producer(topic_key("b"), Producer(p1))
    db.add_producer(topic_key("b"), Producer(p2))
    found = db.find_producers("topic", "*", "")
    assert ids(found) == [p1.id, p2.id]
    assert found[0] is first
    assert ids(db.find_producers("topic", "b", "")) == [p1.id, p2.id]
    assert db.find_producers("topic", "zz", "") == []


def test_lookup_registrations_follows_adds_and_removes() -> None:
    db, _ = make_db()
    p1, p2 = peer(1), peer(2)
    db.add_producer(CLIENT_KEY, Producer(p1))
    db.add_producer(channel_key("t", "c"), Producer(p1))
    db.add_producer(topic_key("t"), Producer(p1))
    db.add_producer(topic_key("t"), Producer(p2))
    assert db.lookup_registrations(p1.id) == [CLIENT_KEY, channel_key("t", "c"), topic_key("t")]
    assert db.lookup_registrations(p2.id) == [topic_key("t")]
    db.remove_producer(topic_key("t"), p1.id)
    assert db.lookup_registrations(p1.id) == [CLIENT_KEY, channel_key("t", "c")]
    db.remove_registration(topic_key("t"))
    assert db.lookup_registrations(p2.id) == []
    assert db.lookup_registrations("nobody") == []


def test_producer_and_items() -> None:
    db, _ = make_db()
    producer = Producer(peer(1))
    db.add_producer(topic_key("t"), producer)
    db.add_registration(topic_key("empty"))
    assert db.producer(topic_key("t"), peer(1).id) is producer
    assert db.producer(topic_key("t"), peer(2).id) is None
    assert db.producer(topic_key("missing"), peer(1).id) is None
    assert db.items() == [(topic_key("t"), [producer]), (topic_key("empty"), [])]


def test_touch_sets_both_clocks() -> None:
    db, clock = make_db()
    p1 = peer(1)
    assert (p1.last_update, p1.last_update_ns) == (0.0, 0)
    db.touch(p1)
    assert (p1.last_update, p1.last_update_ns) == (1000.0, clock.wall)


def test_inactive_strictly_after_the_timeout() -> None:
    db, clock = make_db()
    p1 = peer(1)
    producer = Producer(p1)
    db.touch(p1)
    clock.now += 300.0
    assert db.filter_by_active([producer], 300.0, 45.0) == [producer]
    clock.now += 0.001
    assert db.filter_by_active([producer], 300.0, 45.0) == []
    db.touch(p1)  # a PING
    assert db.filter_by_active([producer], 300.0, 45.0) == [producer]


def test_a_ping_refreshes_every_record_of_the_peer() -> None:
    db, clock = make_db()
    p1 = peer(1)
    db.touch(p1)
    db.add_producer(topic_key("a"), Producer(p1))
    db.add_producer(topic_key("b"), Producer(p1))
    clock.now += 400.0
    assert db.filter_by_active(db.find_producers("topic", "*", ""), 300.0, 45.0) == []
    db.touch(p1)
    assert ids(db.filter_by_active(db.find_producers("topic", "b", ""), 300.0, 45.0)) == [p1.id]


def test_tombstone_hides_for_its_lifetime_then_shows_again() -> None:
    db, clock = make_db()
    p1 = peer(1)
    db.touch(p1)
    producer = Producer(p1)
    assert producer.tombstoned_at_ns == GO_ZERO_TIME_NS
    db.tombstone(producer)
    assert (producer.tombstoned, producer.tombstoned_at_ns) == (True, clock.wall)
    assert db.is_tombstoned(producer, 45.0) is True
    assert db.filter_by_active([producer], 300.0, 45.0) == []
    clock.now += 44.999
    assert db.is_tombstoned(producer, 45.0) is True
    clock.now += 0.001
    assert db.is_tombstoned(producer, 45.0) is False
    assert db.filter_by_active([producer], 300.0, 45.0) == [producer]
    assert producer.tombstoned is True  # the flag stays; only its lifetime is over


def test_a_zero_lifetime_keeps_tombstoned_producers() -> None:
    db, _ = make_db()
    p1 = peer(1)
    db.touch(p1)
    producer = Producer(p1)
    db.tombstone(producer)
    assert db.filter_by_active([producer], 300.0, 0) == [producer]
    assert db.is_tombstoned(producer, 0) is False


def test_tombstoning_again_restarts_the_lifetime() -> None:
    db, clock = make_db()
    p1 = peer(1)
    db.touch(p1)
    producer = Producer(p1)
    db.tombstone(producer)
    clock.now += 40.0
    db.tombstone(producer)
    clock.now += 40.0
    assert db.is_tombstoned(producer, 45.0) is True


def test_a_tombstone_marks_one_record_of_the_peer() -> None:
    db, _ = make_db()
    p1 = peer(1)
    db.touch(p1)
    in_a, in_b = Producer(p1), Producer(p1)
    db.add_producer(topic_key("a"), in_a)
    db.add_producer(topic_key("b"), in_b)
    db.tombstone(in_a)
    assert db.filter_by_active(db.find_producers("topic", "a", ""), 300.0, 45.0) == []
    assert db.filter_by_active(db.find_producers("topic", "b", ""), 300.0, 45.0) == [in_b]


def test_producer_node_and_str() -> None:
    producer = Producer(peer(1, http_port=4999))
    assert producer.node == "nsqd1:4999"
    assert str(producer) == "nsqd1 [4150, 4999]"


def test_peer_info_json_in_go_field_order() -> None:
    p = peer(1)
    p.hostname = "host1"
    p.topology_zone = "z"
    p.topology_region = "r"
    assert list(p.to_json().items()) == [
        ("remote_address", "127.0.0.1:5001"),
        ("hostname", "host1"),
        ("broadcast_address", "nsqd1"),
        ("tcp_port", 4150),
        ("http_port", 4151),
        ("version", "1.3.0"),
        ("topology_zone", "z"),
        ("topology_region", "r"),
    ]


async def test_default_clock_is_trio_time_under_a_mock_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    db = RegistrationDB()
    p1 = peer(1)
    producer = Producer(p1)
    db.touch(p1)
    db.tombstone(producer)
    assert p1.last_update == trio.current_time()
    await trio.sleep(44.0)
    assert db.is_tombstoned(producer, 45.0) is True
    await trio.sleep(2.0)
    assert db.is_tombstoned(producer, 45.0) is False
    assert db.filter_by_active([producer], 300.0, 45.0) == [producer]
    await trio.sleep(253.0)
    assert db.filter_by_active([producer], 300.0, 45.0) == [producer]
    await trio.sleep(2.0)
    assert db.filter_by_active([producer], 300.0, 45.0) == []
