"""The spec of nsqlookupd's registration DB: nsqd producers connect over the V1 TCP protocol,
IDENTIFY, REGISTER and UNREGISTER topics and channels, PING, and disconnect; an operator
tombstones a topic's producer over HTTP (``POST /topic/tombstone``); time makes producers
inactive (``--inactive-producer-timeout``) and tombstones expire (``--tombstone-lifetime``).
It owns what ``/lookup``, ``/nodes`` and ``/topics`` may return in every reachable state.

Two views of one behaviour are kept side by side:

- the **registration DB** as nsqlookupd implements it (registration keys
  ``(category, key, subkey)`` with categories "client", "topic", "channel", each mapping peer id
  to a producer record with ``tombstoned`` and the abstracted ``tombstoned_at``), and the pure
  functions `lookup`, `nodes` and `topics` over it, following nsqlookupd's handlers;
- a **ghost history** of what each producer did (what it registered and has not unregistered on
  its connection, which tombstones are within their lifetime, who has gone quiet), from which the
  invariants state what the HTTP API must answer, independently of the DB's structure.

Mutants seed faults into the DB and its queries; the invariants compare the two views.

Time is abstract. `last_update` is reduced to "older than the inactivity timeout" (set by the
environment action InactiveTimeout, cleared by IDENTIFY and PING); ``tombstoned_at`` to "the
tombstone lifetime has elapsed" (set by TombstoneExpires). The two clocks are independent,
which over-approximates every ratio of the two timeouts.

A peer is one TCP connection (its id is the connection's remote address): a reconnecting nsqd
is a new peer, and lookupd may still hold the old connection (half-open) when the new one
registers. A tombstone names a node (``broadcast_address:http_port``), so it marks every peer of
that nsqd registered for the topic. PING before IDENTIFY is accepted and changes nothing, so it
is not modelled; neither are the HTTP ``/topic/create``, ``/topic/delete``, ``/channel/create``
and ``/channel/delete`` (operator edits of the keys).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from .core import Action, Invariant, Liveness, Mutant, Spec, StepInvariant

CLIENT, TOPIC, CHANNEL = "client", "topic", "channel"
EPHEMERAL = "#ephemeral"

FAULTS = {
    "tombstone_ignored": "/lookup does not filter out tombstoned producers",
    "inactive_returned": "/lookup returns producers that have not pinged within the timeout",
    "ping_not_refreshing": "PING does not update the peer's last_update",
    "tombstone_never_expires": "a tombstone hides its producer beyond --tombstone-lifetime",
    "register_clears_tombstone": (
        "REGISTER of an already registered producer replaces its record, clearing the tombstone"
    ),
    "tombstone_one_producer": "/topic/tombstone marks only the first matching producer",
    "close_leaves_registrations": "a closed connection is removed only from the client key",
    "unregister_channel_drops_topic": (
        "UNREGISTER <topic> <channel> also removes the producer from the topic"
    ),
    "topic_unregister_keeps_channels": (
        "UNREGISTER <topic> leaves the producer in the topic's channel registrations"
    ),
    "ephemeral_channel_kept": (
        "UNREGISTER of the last producer of an #ephemeral channel keeps the channel key"
    ),
}


class Peer(NamedTuple):
    """One TCP connection from an nsqd: `node` is the nsqd, `conn` which of its connections."""

    node: int
    conn: int


Registration = tuple[str, str, str]
"""``(category, key, subkey)``: ("client", "", ""), ("topic", T, ""), ("channel", T, C)."""


class Producer(NamedTuple):
    """A peer's record under one registration key."""

    peer: Peer
    tombstoned: bool = False
    tombstone_expired: bool = False
    """``now - tombstoned_at >= --tombstone-lifetime``."""


class DB(NamedTuple):
    """The registration map: the keys (they outlive their producers) and the producer records."""

    keys: frozenset[Registration] = frozenset()
    producers: frozenset[tuple[Registration, Producer]] = frozenset()


class Ghost(NamedTuple):
    """What the producers did, as the invariants read it."""

    registered: frozenset[tuple[Peer, str]] = frozenset()
    channels: frozenset[tuple[Peer, str, str]] = frozenset()
    tombstoned: frozenset[tuple[Peer, str]] = frozenset()
    """Tombstones still within their lifetime, for a peer registered for the topic."""
    quiet: frozenset[Peer] = frozenset()
    """Peers that have sent neither IDENTIFY nor PING within the inactivity timeout."""
    topic_keys: frozenset[str] = frozenset()
    channel_keys: frozenset[tuple[str, str]] = frozenset()


class State(NamedTuple):
    connected: frozenset[Peer]
    identified: frozenset[Peer]
    inactive: frozenset[Peer]
    """Identified peers whose ``last_update`` is older than the inactivity timeout."""
    db: DB
    ghost: Ghost
    tombstones_left: int
    """The operator's budget of ``POST /topic/tombstone`` calls."""


class Lookup(NamedTuple):
    """The body of ``GET /lookup?topic=T`` (a missing topic key is 404, `lookup` gives None)."""

    channels: tuple[str, ...]
    producers: tuple[Peer, ...]


class Bounds(NamedTuple):
    peers: tuple[Peer, ...]
    topics: tuple[str, ...]
    channels: tuple[str, ...]
    tombstones: int


Faults = frozenset[str]

CONFIGS = {
    "two_nsqds": Bounds(
        peers=(Peer(0, 0), Peer(1, 0)),
        topics=("t",),
        channels=("c", "e" + EPHEMERAL),
        tombstones=2,
    ),
    "reconnect": Bounds(
        peers=(Peer(0, 0), Peer(0, 1), Peer(1, 0)),
        topics=("t" + EPHEMERAL,),
        channels=("c",),
        tombstones=2,
    ),
}

# Each mutant runs on the configuration that exposes its fault soonest.
MUTANT_CONFIG = {fault: "two_nsqds" for fault in FAULTS} | {"tombstone_one_producer": "reconnect"}


def name(peer: Peer) -> str:
    return f"n{peer.node}{'abcdefgh'[peer.conn]}"


def initial_state(bounds: Bounds) -> State:
    empty: frozenset[Peer] = frozenset()
    return State(empty, empty, empty, DB(), Ghost(), bounds.tombstones)


# -- the registration DB (registration_db.go) ------------------------------------------------


def topic_key(topic: str) -> Registration:
    return (TOPIC, topic, "")


def channel_key(topic: str, channel: str) -> Registration:
    return (CHANNEL, topic, channel)


CLIENT_KEY: Registration = (CLIENT, "", "")


def add_producer(db: DB, key: Registration, peer: Peer, faults: Faults) -> DB:
    """AddProducer: creates the key if needed; a peer already under the key is left as it is
    (its tombstone survives a second REGISTER)."""
    existing = [p for k, p in db.producers if k == key and p.peer == peer]
    producers = db.producers
    if existing and "register_clears_tombstone" in faults:
        producers = producers - {(key, existing[0])}
        existing = []
    if not existing:
        producers = producers | {(key, Producer(peer))}
    return DB(db.keys | {key}, producers)


def remove_producer(db: DB, key: Registration, peer: Peer) -> tuple[DB, int]:
    """RemoveProducer: the DB without `peer` under `key` (which stays), and how many are left."""
    producers = frozenset((k, p) for k, p in db.producers if not (k == key and p.peer == peer))
    return DB(db.keys, producers), sum(1 for k, _ in producers if k == key)


def remove_registration(db: DB, key: Registration) -> DB:
    return DB(db.keys - {key}, frozenset((k, p) for k, p in db.producers if k != key))


def find_registrations(db: DB, category: str, key: str, subkey: str) -> list[Registration]:
    """FindRegistrations: "*" matches any key or subkey."""
    return sorted(
        r for r in db.keys if r[0] == category and key in ("*", r[1]) and subkey in ("*", r[2])
    )


def find_producers(db: DB, key: Registration) -> list[Producer]:
    return sorted(p for k, p in db.producers if k == key)


def lookup_registrations(db: DB, peer: Peer) -> list[Registration]:
    return sorted(k for k, p in db.producers if p.peer == peer)


def is_tombstoned(producer: Producer, faults: Faults) -> bool:
    if "tombstone_never_expires" in faults:
        return producer.tombstoned
    return producer.tombstoned and not producer.tombstone_expired


def filter_by_active(
    state: State,
    producers: Iterable[Producer],
    faults: Faults,
    inactivity: bool = True,
    tombstones: bool = True,
) -> list[Producer]:
    """FilterByActive: drops producers inactive beyond the timeout and, unless `tombstones` is
    off (``/nodes`` passes a zero lifetime), those tombstoned within the lifetime. (Turning
    `inactivity` off is only for a mutant.)"""
    return [
        p
        for p in producers
        if not (inactivity and p.peer in state.inactive)
        and not (tombstones and is_tombstoned(p, faults))
    ]


# -- the HTTP queries (http.go) --------------------------------------------------------------


def lookup(state: State, topic: str, faults: Faults = frozenset()) -> Lookup | None:
    """``GET /lookup?topic=T``: None (404 TOPIC_NOT_FOUND) without the topic key; else every
    channel key of the topic, and the topic's producers that are active and not tombstoned."""
    db = state.db
    if topic_key(topic) not in db.keys:
        return None
    channels = tuple(k[2] for k in find_registrations(db, CHANNEL, topic, "*"))
    producers = filter_by_active(
        state,
        find_producers(db, topic_key(topic)),
        faults,
        inactivity="inactive_returned" not in faults,
        tombstones="tombstone_ignored" not in faults,
    )
    return Lookup(channels, tuple(p.peer for p in producers))


NodeInfo = tuple[Peer, tuple[tuple[str, bool], ...]]
"""A ``/nodes`` entry: the peer and its ``(topic, tombstoned)`` pairs."""


def nodes(state: State, faults: Faults = frozenset()) -> tuple[NodeInfo, ...]:
    """``GET /nodes``: every active client producer, with its topics and their tombstones."""
    db = state.db
    result = []
    for client in filter_by_active(state, find_producers(db, CLIENT_KEY), faults, tombstones=False):
        topics = [k[1] for k in lookup_registrations(db, client.peer) if k[0] == TOPIC]
        producers = [(t, find_producers(db, topic_key(t))) for t in topics]
        flags = tuple(
            (t, any(is_tombstoned(p, faults) for p in ps if p.peer == client.peer))
            for t, ps in producers
        )
        result.append((client.peer, flags))
    return tuple(result)


def topics(state: State) -> tuple[str, ...]:
    """``GET /topics``: every topic key, with or without producers."""
    return tuple(k[1] for k in find_registrations(state.db, TOPIC, "*", ""))


# -- the TCP protocol (lookup_protocol_v1.go), each command with its ghost record -----------


def connect(state: State, peer: Peer) -> State:
    return state._replace(connected=state.connected | {peer})


def identify(state: State, peer: Peer, faults: Faults) -> State:
    """IDENTIFY: the peer gets its peer info, ``last_update = now``, and a client record."""
    ghost = state.ghost._replace(quiet=state.ghost.quiet - {peer})
    return state._replace(
        identified=state.identified | {peer},
        inactive=state.inactive - {peer},
        db=add_producer(state.db, CLIENT_KEY, peer, faults),
        ghost=ghost,
    )


def register(state: State, peer: Peer, topic: str, channel: str | None, faults: Faults) -> State:
    """REGISTER: adds the peer to the channel key (if named) and to the topic key."""
    db, ghost = state.db, state.ghost
    if channel is not None:
        db = add_producer(db, channel_key(topic, channel), peer, faults)
        ghost = ghost._replace(
            channels=ghost.channels | {(peer, topic, channel)},
            channel_keys=ghost.channel_keys | {(topic, channel)},
        )
    db = add_producer(db, topic_key(topic), peer, faults)
    ghost = ghost._replace(
        registered=ghost.registered | {(peer, topic)}, topic_keys=ghost.topic_keys | {topic}
    )
    return state._replace(db=db, ghost=ghost)


def unregister(state: State, peer: Peer, topic: str, channel: str | None, faults: Faults) -> State:
    if channel is None:
        return _unregister_topic(state, peer, topic, faults)
    return _unregister_channel(state, peer, topic, channel, faults)


def _unregister_channel(
    state: State, peer: Peer, topic: str, channel: str, faults: Faults
) -> State:
    """UNREGISTER <topic> <channel>: removes the peer from that channel key; an #ephemeral
    channel key left without producers goes too (even if this peer was not in it)."""
    key = channel_key(topic, channel)
    db, left = remove_producer(state.db, key, peer)
    if left == 0 and channel.endswith(EPHEMERAL) and "ephemeral_channel_kept" not in faults:
        db = remove_registration(db, key)
    if "unregister_channel_drops_topic" in faults:
        db, _ = remove_producer(db, topic_key(topic), peer)
    ghost = state.ghost
    channels = ghost.channels - {(peer, topic, channel)}
    channel_keys = ghost.channel_keys
    if channel.endswith(EPHEMERAL) and not any(r[1:] == (topic, channel) for r in channels):
        channel_keys = channel_keys - {(topic, channel)}
    ghost = ghost._replace(channels=channels, channel_keys=channel_keys)
    return state._replace(db=db, ghost=ghost)


def _unregister_topic(state: State, peer: Peer, topic: str, faults: Faults) -> State:
    """UNREGISTER <topic>: removes the peer from every channel key of the topic and from the
    topic key; an #ephemeral topic key left without producers goes too (its channel keys stay).
    Dropping the topic record drops its tombstone: a later REGISTER starts afresh."""
    db = state.db
    if "topic_unregister_keeps_channels" not in faults:
        for key in find_registrations(db, CHANNEL, topic, "*"):
            db, _ = remove_producer(db, key, peer)
    db, left = remove_producer(db, topic_key(topic), peer)
    if left == 0 and topic.endswith(EPHEMERAL):
        db = remove_registration(db, topic_key(topic))
    ghost = state.ghost
    registered = ghost.registered - {(peer, topic)}
    topic_keys = ghost.topic_keys
    if topic.endswith(EPHEMERAL) and not any(t == topic for _, t in registered):
        topic_keys = topic_keys - {topic}
    ghost = ghost._replace(
        registered=registered,
        channels=frozenset(r for r in ghost.channels if r[:2] != (peer, topic)),
        tombstoned=ghost.tombstoned - {(peer, topic)},
        topic_keys=topic_keys,
    )
    return state._replace(db=db, ghost=ghost)


def ping(state: State, peer: Peer, faults: Faults) -> State:
    """PING from an identified peer: ``last_update = now``."""
    inactive = state.inactive
    if "ping_not_refreshing" not in faults:
        inactive = inactive - {peer}
    ghost = state.ghost._replace(quiet=state.ghost.quiet - {peer})
    return state._replace(inactive=inactive, ghost=ghost)


def close(state: State, peer: Peer, faults: Faults) -> State:
    """The connection closes: the peer is removed from every registration it is in; the keys
    stay, #ephemeral ones included."""
    db = state.db
    keys = [CLIENT_KEY] if "close_leaves_registrations" in faults else []
    for key in keys or lookup_registrations(db, peer):
        db, _ = remove_producer(db, key, peer)
    ghost = state.ghost
    ghost = ghost._replace(
        registered=frozenset(r for r in ghost.registered if r[0] != peer),
        channels=frozenset(r for r in ghost.channels if r[0] != peer),
        tombstoned=frozenset(r for r in ghost.tombstoned if r[0] != peer),
        quiet=ghost.quiet - {peer},
    )
    return state._replace(
        connected=state.connected - {peer},
        identified=state.identified - {peer},
        inactive=state.inactive - {peer},
        db=db,
        ghost=ghost,
    )


# -- the environment: the operator and time --------------------------------------------------


def tombstone_topic_producer(state: State, topic: str, node: int, faults: Faults) -> State:
    """``POST /topic/tombstone?topic=T&node=N``: marks (again: ``tombstoned_at = now``) every
    producer of the topic whose node is N, active or not."""
    db = state.db
    matching = [p for p in find_producers(db, topic_key(topic)) if p.peer.node == node]
    if "tombstone_one_producer" in faults:
        matching = matching[:1]
    key = topic_key(topic)
    for producer in matching:
        marked = producer._replace(tombstoned=True, tombstone_expired=False)
        db = DB(db.keys, db.producers - {(key, producer)} | {(key, marked)})
    ghost = state.ghost
    hidden = {(p, t) for p, t in ghost.registered if t == topic and p.node == node}
    ghost = ghost._replace(tombstoned=ghost.tombstoned | hidden)
    return state._replace(db=db, ghost=ghost, tombstones_left=state.tombstones_left - 1)


def tombstone_expires(state: State, peer: Peer, topic: str) -> State:
    """The tombstone lifetime elapses for `peer`'s tombstone on `topic`."""
    key = topic_key(topic)
    producers = frozenset(
        (k, p._replace(tombstone_expired=True) if k == key and p.peer == peer else p)
        for k, p in state.db.producers
    )
    ghost = state.ghost._replace(tombstoned=state.ghost.tombstoned - {(peer, topic)})
    return state._replace(db=DB(state.db.keys, producers), ghost=ghost)


def inactive_timeout(state: State, peer: Peer) -> State:
    """The inactivity timeout elapses since `peer`'s last IDENTIFY or PING."""
    ghost = state.ghost._replace(quiet=state.ghost.quiet | {peer})
    return state._replace(inactive=state.inactive | {peer}, ghost=ghost)


def fresh_tombstones(state: State) -> set[tuple[Peer, str]]:
    """The tombstones whose lifetime has not elapsed, in either view."""
    in_db = {
        (p.peer, k[1])
        for k, p in state.db.producers
        if k[0] == TOPIC and p.tombstoned and not p.tombstone_expired
    }
    return in_db | state.ghost.tombstoned


# -- what the HTTP API must answer, from the ghost history ------------------------------------


def expected_producers(state: State, topic: str) -> tuple[Peer, ...]:
    """The peers registered for `topic` on a live, identified connection that have pinged within
    the timeout and carry no tombstone within its lifetime for the topic."""
    ghost = state.ghost
    return tuple(
        sorted(
            peer
            for peer, t in ghost.registered
            if t == topic
            and peer in state.identified
            and peer not in ghost.quiet
            and (peer, topic) not in ghost.tombstoned
        )
    )


def expected_nodes(state: State) -> tuple[NodeInfo, ...]:
    ghost = state.ghost
    return tuple(
        (
            peer,
            tuple(
                sorted((t, (peer, t) in ghost.tombstoned) for p, t in ghost.registered if p == peer)
            ),
        )
        for peer in sorted(state.identified - ghost.quiet)
    )


def returned(state: State, topic: str, faults: Faults) -> tuple[Peer, ...]:
    found = lookup(state, topic, faults)
    return () if found is None else found.producers


def _names(peers: Iterable[Peer]) -> str:
    return ", ".join(name(p) for p in sorted(peers)) or "none"


def _keys(keys: Iterable[Registration]) -> str:
    return ", ".join(":".join(k) for k in sorted(keys)) or "nothing"


def show_nodes(entries: tuple[NodeInfo, ...]) -> str:
    def topic(t: str, tombstoned: bool) -> str:
        return f"{t} (tombstoned)" if tombstoned else t

    shown = [f"{name(p)} [{', '.join(topic(*f) for f in flags)}]" for p, flags in entries]
    return "; ".join(shown) or "empty"


def make_invariants(bounds: Bounds, faults: Faults) -> tuple[Invariant, ...]:
    """The invariants, most specific first: the checker reports the first that fails."""

    def no_registration_without_connection(state: State) -> bool | str:
        stray = {p.peer for _, p in state.db.producers if p.peer not in state.identified}
        return not stray or f"{_names(stray)} still registered after its connection closed"

    def hides_tombstoned(state: State) -> bool | str:
        for peer, topic in sorted(state.ghost.tombstoned):
            if peer in returned(state, topic, faults):
                return f"/lookup?topic={topic} returns {name(peer)}, tombstoned for it"
        return True

    def hides_inactive(state: State) -> bool | str:
        for topic in bounds.topics:
            quiet = state.ghost.quiet & set(returned(state, topic, faults))
            if quiet:
                return f"/lookup?topic={topic} returns {_names(quiet)}, inactive"
        return True

    def returns_live(state: State) -> bool | str:
        for topic in bounds.topics:
            missing = set(expected_producers(state, topic)) - set(returned(state, topic, faults))
            if missing:
                return f"/lookup?topic={topic} misses {_names(missing)}, live and registered"
        return True

    def returns_only_live(state: State) -> bool | str:
        for topic in bounds.topics:
            extra = set(returned(state, topic, faults)) - set(expected_producers(state, topic))
            if extra:
                return f"/lookup?topic={topic} returns {_names(extra)}, not live and registered"
        return True

    def finds_registered_topics(state: State) -> bool | str:
        for topic in bounds.topics:
            if (lookup(state, topic, faults) is None) != (topic not in state.ghost.topic_keys):
                wrong = "404" if topic in state.ghost.topic_keys else "found"
                return f"/lookup?topic={topic} is wrongly {wrong}"
        return True

    def lists_channels(state: State) -> bool | str:
        for topic in bounds.topics:
            found = lookup(state, topic, faults)
            want = tuple(sorted(c for t, c in state.ghost.channel_keys if t == topic))
            if found is not None and found.channels != want:
                return f"/lookup?topic={topic} lists channels {found.channels}, expected {want}"
        return True

    def lists_nodes(state: State) -> bool | str:
        got, want = nodes(state, faults), expected_nodes(state)
        return got == want or f"/nodes is {show_nodes(got)}, expected {show_nodes(want)}"

    def lists_topics(state: State) -> bool | str:
        got, want = topics(state), tuple(sorted(state.ghost.topic_keys))
        return got == want or f"/topics is {got}, expected {want}"

    return (
        Invariant("closed_connection_leaves_no_registration", no_registration_without_connection),
        Invariant("lookup_hides_tombstoned", hides_tombstoned),
        Invariant("lookup_hides_inactive", hides_inactive),
        Invariant("lookup_returns_live_registered", returns_live),
        Invariant("lookup_returns_only_live_registered", returns_only_live),
        Invariant("lookup_finds_registered_topics", finds_registered_topics),
        Invariant("lookup_lists_channels", lists_channels),
        Invariant("nodes_lists_active_producers", lists_nodes),
        Invariant("topics_lists_registered_topics", lists_topics),
    )


def make_step_invariants(bounds: Bounds) -> tuple[StepInvariant, ...]:
    peers = {name(p): p for p in bounds.peers}

    def unregister_only_named(before: State, label: str, after: State) -> bool | str:
        """UNREGISTER T C removes the peer from channel T/C; UNREGISTER T from topic T and
        from T's channels; nothing else changes and nothing is added."""
        if not label.startswith("UNREGISTER("):
            return True
        peer_name, topic, *channel = label[len("UNREGISTER(") : -1].split(", ")
        peer = peers[peer_name]

        def named(key: Registration) -> bool:
            if channel:
                return key == channel_key(topic, channel[0])
            return key == topic_key(topic) or key[:2] == (CHANNEL, topic)

        gone = {k for k, p in before.db.producers - after.db.producers if p.peer == peer}
        want = {k for k, p in before.db.producers if p.peer == peer and named(k)}
        others = {r for r in before.db.producers ^ after.db.producers if r[1].peer != peer}
        if after.db.producers - before.db.producers or others:
            return f"{label} changed other registrations"
        if gone != want:
            return f"{label} removed {_keys(gone)}, expected {_keys(want)}"
        return True

    return (StepInvariant("unregister_removes_only_what_it_names", unregister_only_named),)


def make_liveness(bounds: Bounds, faults: Faults) -> tuple[Liveness, ...]:
    def undiscovered(state: State) -> Iterator[tuple[str, str]]:
        for peer, topic in state.ghost.registered:
            if peer in state.identified and peer not in returned(state, topic, faults):
                yield name(peer), topic

    return (Liveness("registered_producer_eventually_discoverable", undiscovered),)


# -- the actions and the specs ---------------------------------------------------------------

Instances = Iterator[tuple[str, State]]


def make_actions(bounds: Bounds, faults: Faults) -> tuple[Action, ...]:
    """Producers act unfairly (they may stop at any point); PING from an identified peer is fair
    (nsqd pings every 15 s), and so is the passing of a tombstone's lifetime."""
    subjects: list[tuple[str, str | None]] = [(t, None) for t in bounds.topics]
    subjects += [(t, c) for t in bounds.topics for c in bounds.channels]

    def params(peer: Peer, topic: str, channel: str | None) -> str:
        return ", ".join([name(peer), topic, *([channel] if channel else [])])

    def connects(s: State) -> Instances:
        for peer in bounds.peers:
            if peer not in s.connected:
                yield f"Connect({name(peer)})", connect(s, peer)

    def identifies(s: State) -> Instances:
        for peer in sorted(s.connected - s.identified):
            yield f"IDENTIFY({name(peer)})", identify(s, peer, faults)

    def registers(s: State) -> Instances:
        for peer in sorted(s.identified):
            for topic, channel in subjects:
                label = f"REGISTER({params(peer, topic, channel)})"
                yield label, register(s, peer, topic, channel, faults)

    def unregisters(s: State) -> Instances:
        for peer in sorted(s.identified):
            for topic, channel in subjects:
                label = f"UNREGISTER({params(peer, topic, channel)})"
                yield label, unregister(s, peer, topic, channel, faults)

    def pings(s: State) -> Instances:
        for peer in sorted(s.identified):
            yield f"PING({name(peer)})", ping(s, peer, faults)

    def closes(s: State) -> Instances:
        for peer in sorted(s.connected):
            yield f"Close({name(peer)})", close(s, peer, faults)

    def times_out(s: State) -> Instances:
        for peer in sorted(s.identified - s.ghost.quiet):
            yield f"InactiveTimeout({name(peer)})", inactive_timeout(s, peer)

    def tombstones(s: State) -> Instances:
        """Only calls that name a registered producer (the others change nothing)."""
        if s.tombstones_left == 0:
            return
        registered = {(p.peer.node, k[1]) for k, p in s.db.producers if k[0] == TOPIC}
        registered |= {(p.node, t) for p, t in s.ghost.registered}
        for node, topic in sorted(registered):
            yield f"Tombstone({topic}, n{node})", tombstone_topic_producer(s, topic, node, faults)

    def expires(s: State) -> Instances:
        for peer, topic in sorted(fresh_tombstones(s)):
            yield f"TombstoneExpires({name(peer)}, {topic})", tombstone_expires(s, peer, topic)

    return (
        Action("Connect", connects),
        Action("IDENTIFY", identifies),
        Action("REGISTER", registers),
        Action("UNREGISTER", unregisters),
        Action("PING", pings, fair=True),
        Action("Close", closes),
        Action("InactiveTimeout", times_out),
        Action("Tombstone", tombstones),
        Action("TombstoneExpires", expires, fair=True),
    )


def show(state: State) -> str:
    def flags(p: Producer) -> str:
        if not p.tombstoned:
            return ""
        return " (tombstone expired)" if p.tombstone_expired else " (tombstoned)"

    lines = [
        f"connected: {_names(state.connected)}; identified: {_names(state.identified)}; "
        f"inactive: {_names(state.inactive)}; tombstones left: {state.tombstones_left}"
    ]
    for key in sorted(state.db.keys):
        members = [f"{name(p.peer)}{flags(p)}" for p in find_producers(state.db, key)]
        lines.append(f"{':'.join(key)} -> {', '.join(members) or '-'}")
    ghost = state.ghost
    registered = [f"{name(p)}:{t}" for p, t in sorted(ghost.registered)]
    registered += [f"{name(p)}:{t}/{c}" for p, t, c in sorted(ghost.channels)]
    tombstoned = [f"{name(p)}:{t}" for p, t in sorted(ghost.tombstoned)]
    lines.append(
        f"ghost: registered {' '.join(registered) or '-'}; tombstoned {' '.join(tombstoned) or '-'}"
        f"; quiet {_names(ghost.quiet)}"
    )
    return "\n".join(lines)


def build(config: str, faults: Faults = frozenset()) -> Spec:
    bounds = CONFIGS[config]
    return Spec(
        name=f"lookupd_registration.{config}",
        description=(
            "nsqlookupd registration DB: IDENTIFY/REGISTER/UNREGISTER/PING/close, inactivity, "
            "tombstones, and what /lookup, /nodes, /topics return"
        ),
        init=lambda: [initial_state(bounds)],
        actions=make_actions(bounds, faults),
        invariants=make_invariants(bounds, faults),
        step_invariants=make_step_invariants(bounds),
        liveness=make_liveness(bounds, faults),
        bounds={
            "peers": tuple(name(p) for p in bounds.peers),
            "topics": bounds.topics,
            "channels": bounds.channels,
            "tombstones": bounds.tombstones,
        },
        show=show,
    )


def specs() -> list[Spec]:
    return [build(config) for config in CONFIGS]


def mutants() -> list[Mutant]:
    return [
        Mutant(
            f"lookupd_registration.{fault}",
            description,
            build(MUTANT_CONFIG[fault], frozenset({fault})),
        )
        for fault, description in FAULTS.items()
    ]
