"""nsqlookupd's registration DB (docs/protocol.md §6.2; the executable spec is
``spec/lookupd_registration.py``): registration keys ``(category, key, subkey)`` -> the
producers registered under each, by peer id.

Categories: ``client`` ("", "") holds every identified nsqd connection, ``topic`` (T, "") the
producers of topic T, ``channel`` (T, C) those of channel C of T. A peer is one TCP connection
(its id is the connection's remote ``ip:port``); every producer record of a peer shares its
`PeerInfo`, so a PING refreshes its liveness everywhere, while a tombstone marks one record.
Keys outlive their producers: only the ephemeral UNREGISTER cases and the HTTP deletes remove
them. "*" as key or subkey matches any (Go's FindRegistrations / FindProducers).

Liveness and tombstones are timed on `trio.current_time()` (or an injected clock), so tests
can use Trio's MockClock; the wall-clock Unix nanoseconds Go reports in ``/debug`` are kept
beside them. Lookups are indexed by category, by (category, key) and by peer, where Go scans
the whole map; answers are in registration order where Go's are in map order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, TypeVar

import trio

__all__ = [
    "CLIENT",
    "CLIENT_KEY",
    "GO_ZERO_TIME_NS",
    "Clock",
    "PeerInfo",
    "Producer",
    "Registration",
    "RegistrationDB",
    "channel_key",
    "topic_key",
]

CLIENT, TOPIC, CHANNEL = "client", "topic", "channel"
#: What Go's ``time.Time{}.UnixNano()`` gives (the int64 overflow of year 1): the
#: ``tombstoned_at`` ``/debug`` shows for a producer never tombstoned.
GO_ZERO_TIME_NS = -6795364578871345152

Clock = Callable[[], float]
WallClock = Callable[[], int]


class Registration(NamedTuple):
    """A registration key: ``("client", "", "")``, ``("topic", T, "")`` or
    ``("channel", T, C)``."""

    category: str
    key: str
    subkey: str

    def is_match(self, category: str, key: str, subkey: str) -> bool:
        """Go's IsMatch: same category, and key / subkey equal or ``"*"``."""
        return (
            category == self.category
            and key in ("*", self.key)
            and (subkey == "*" or subkey == self.subkey)
        )


CLIENT_KEY = Registration(CLIENT, "", "")


def topic_key(topic: str) -> Registration:
    return Registration(TOPIC, topic, "")


def channel_key(topic: str, channel: str) -> Registration:
    return Registration(CHANNEL, topic, channel)


class PeerInfo:
    """One identified nsqd connection: what it sent in IDENTIFY, and when it last spoke
    (IDENTIFY or PING): `last_update` on the DB's clock, `last_update_ns` in Unix ns."""

    __slots__ = (
        "broadcast_address",
        "hostname",
        "http_port",
        "id",
        "last_update",
        "last_update_ns",
        "remote_address",
        "tcp_port",
        "topology_region",
        "topology_zone",
        "version",
    )

    def __init__(
        self,
        id: str,
        *,
        remote_address: str = "",
        hostname: str = "",
        broadcast_address: str = "",
        tcp_port: int = 0,
        http_port: int = 0,
        version: str = "",
        topology_zone: str = "",
        topology_region: str = "",
    ) -> None:
        self.id = id
        self.remote_address = remote_address
        self.hostname = hostname
        self.broadcast_address = broadcast_address
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.version = version
        self.topology_zone = topology_zone
        self.topology_region = topology_region
        self.last_update = 0.0
        self.last_update_ns = 0

    def to_json(self) -> dict[str, object]:
        """As Go's PeerInfo encodes (``/lookup``'s producers), in its field order."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "topology_zone": self.topology_zone,
            "topology_region": self.topology_region,
        }

    def __repr__(self) -> str:
        return (
            f"PeerInfo({self.id!r}, {self.broadcast_address} [{self.tcp_port}, {self.http_port}])"
        )


class Producer:
    """A peer's record under one registration key, with that key's tombstone."""

    __slots__ = ("peer_info", "tombstoned", "tombstoned_at", "tombstoned_at_ns")

    def __init__(self, peer_info: PeerInfo) -> None:
        self.peer_info = peer_info
        self.tombstoned = False
        self.tombstoned_at = 0.0
        self.tombstoned_at_ns = GO_ZERO_TIME_NS

    @property
    def node(self) -> str:
        """``broadcast_address:http_port``, how ``/topic/tombstone`` names it."""
        return f"{self.peer_info.broadcast_address}:{self.peer_info.http_port}"

    def __str__(self) -> str:
        p = self.peer_info
        return f"{p.broadcast_address} [{p.tcp_port}, {p.http_port}]"


class RegistrationDB:
    """The registration map and the queries nsqlookupd's protocol and HTTP API make of it."""

    def __init__(
        self, clock: Clock = trio.current_time, wall_clock: WallClock = time.time_ns
    ) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self._map: dict[Registration, dict[str, Producer]] = {}
        # Indexes (dicts as ordered sets): by category, by (category, key), by peer id.
        self._by_category: dict[str, dict[Registration, None]] = {}
        self._by_key: dict[tuple[str, str], dict[Registration, None]] = {}
        self._by_peer: dict[str, dict[Registration, None]] = {}

    # -- keys and producers ---------------------------------------------------------------

    def add_registration(self, key: Registration) -> None:
        """Add `key` without producers (a no-op if it exists)."""
        if key not in self._map:
            self._map[key] = {}
            self._by_category.setdefault(key.category, {})[key] = None
            self._by_key.setdefault((key.category, key.key), {})[key] = None

    def add_producer(self, key: Registration, producer: Producer) -> bool:
        """Add `producer` under `key` (created if need be); False, and nothing changes, if
        its peer is there already (its record, tombstone included, stays)."""
        self.add_registration(key)
        producers = self._map[key]
        peer_id = producer.peer_info.id
        if peer_id in producers:
            return False
        producers[peer_id] = producer
        self._by_peer.setdefault(peer_id, {})[key] = None
        return True

    def remove_producer(self, key: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove the peer from `key` (which stays, even empty): whether it was there, and
        how many producers are left (0 for a missing key)."""
        producers = self._map.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if removed:
            self._unindex_peer(peer_id, key)
        return removed, len(producers)

    def remove_registration(self, key: Registration) -> None:
        """Remove `key` and its producers."""
        producers = self._map.pop(key, None)
        if producers is None:
            return
        for peer_id in producers:
            self._unindex_peer(peer_id, key)
        _discard(self._by_category, key.category, key)
        _discard(self._by_key, (key.category, key.key), key)

    def _unindex_peer(self, peer_id: str, key: Registration) -> None:
        _discard(self._by_peer, peer_id, key)

    # -- queries --------------------------------------------------------------------------

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """The keys matching, "*" for any key or subkey."""
        if key != "*" and subkey != "*":
            exact = Registration(category, key, subkey)
            return [exact] if exact in self._map else []
        if key == "*":
            candidates: Iterable[Registration] = self._by_category.get(category, ())
        else:
            candidates = self._by_key.get((category, key), ())
        return [k for k in candidates if k.is_match(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """The producers under the matching keys, each peer once (its first record)."""
        if key != "*" and subkey != "*":
            return list(self._map.get(Registration(category, key, subkey), {}).values())
        seen: dict[str, Producer] = {}
        for registration in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._map[registration].items():
                seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every key the peer is registered under."""
        return list(self._by_peer.get(peer_id, ()))

    def producer(self, key: Registration, peer_id: str) -> Producer | None:
        """The peer's record under `key`, if any."""
        return self._map.get(key, {}).get(peer_id)

    def items(self) -> list[tuple[Registration, list[Producer]]]:
        """Every key with its producers (``/debug``)."""
        return [(key, list(producers.values())) for key, producers in self._map.items()]

    # -- time -----------------------------------------------------------------------------

    def touch(self, peer_info: PeerInfo) -> None:
        """The peer spoke (IDENTIFY or PING): it is active from now."""
        peer_info.last_update = self.clock()
        peer_info.last_update_ns = self.wall_clock()

    def tombstone(self, producer: Producer) -> None:
        """Hide `producer` from ``/lookup`` for the tombstone lifetime from now."""
        producer.tombstoned = True
        producer.tombstoned_at = self.clock()
        producer.tombstoned_at_ns = self.wall_clock()

    def is_tombstoned(self, producer: Producer, lifetime: float) -> bool:
        """Tombstoned less than `lifetime` seconds ago."""
        return producer.tombstoned and self.clock() - producer.tombstoned_at < lifetime

    def filter_by_active(
        self, producers: Iterable[Producer], inactivity_timeout: float, tombstone_lifetime: float
    ) -> list[Producer]:
        """Go's FilterByActive: drop producers silent for more than `inactivity_timeout`
        seconds and those tombstoned within `tombstone_lifetime` (0: keep tombstoned ones)."""
        now = self.clock()
        return [
            p
            for p in producers
            if not now - p.peer_info.last_update > inactivity_timeout
            and not (p.tombstoned and now - p.tombstoned_at < tombstone_lifetime)
        ]

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: object) -> bool:
        return key in self._map


_Name = TypeVar("_Name")


def _discard(index: dict[_Name, dict[Registration, None]], name: _Name, key: Registration) -> None:
    members = index.get(name)
    if members is not None:
        members.pop(key, None)
        if not members:
            del index[name]
