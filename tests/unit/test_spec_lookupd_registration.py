"""The nsqlookupd registration spec: its configurations pass, every mutant is rejected by the
property it violates, and the transition functions give the /lookup that NSQ gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spec import Action, Mutant, Spec, check, format_trace
from spec import lookupd_registration as lr
from spec.lookupd_registration import Lookup, Peer, State

N0A, N0B, N1A = Peer(0, 0), Peer(0, 1), Peer(1, 0)
NO_FAULTS: frozenset[str] = frozenset()

REJECTED_BY = {
    "lookupd_registration.tombstone_ignored": "lookup_hides_tombstoned",
    "lookupd_registration.inactive_returned": "lookup_hides_inactive",
    # /nodes shows it first: the live producer is dropped from it before it registers a topic.
    "lookupd_registration.ping_not_refreshing": "nodes_lists_active_producers",
    "lookupd_registration.tombstone_never_expires": "lookup_returns_live_registered",
    "lookupd_registration.register_clears_tombstone": "lookup_hides_tombstoned",
    "lookupd_registration.tombstone_one_producer": "lookup_hides_tombstoned",
    "lookupd_registration.close_leaves_registrations": "closed_connection_leaves_no_registration",
    "lookupd_registration.unregister_channel_drops_topic": "unregister_removes_only_what_it_names",
    "lookupd_registration.topic_unregister_keeps_channels": (
        "unregister_removes_only_what_it_names"
    ),
    "lookupd_registration.ephemeral_channel_kept": "lookup_lists_channels",
}


@pytest.mark.parametrize("spec", lr.specs(), ids=lambda s: s.name)
def test_each_configuration_passes(spec: Spec) -> None:
    result = check(spec)
    assert result.violation is None, format_trace(spec, result.violation)
    assert result.ok and result.states > 1000


def test_names_follow_the_module() -> None:
    names = [s.name for s in lr.specs()]
    assert names == ["lookupd_registration.two_nsqds", "lookupd_registration.reconnect"]
    assert {m.name for m in lr.mutants()} == set(REJECTED_BY)


@pytest.mark.parametrize("mutant", lr.mutants(), ids=lambda m: m.name)
def test_each_mutant_is_rejected_by_its_property(mutant: Mutant) -> None:
    violation = check(mutant.spec).violation
    assert violation is not None, f"{mutant.name} was not rejected"
    assert violation.property == REJECTED_BY[mutant.name], format_trace(mutant.spec, violation)
    assert len(violation.trace) > 1


def test_liveness_needs_fair_pings() -> None:
    """Without fair PINGs a registered producer may stay inactive, hence undiscovered, forever:
    the liveness property is not vacuous."""
    spec = lr.build("two_nsqds")
    actions = tuple(
        Action(a.name, a.instances, fair=False) if a.name == "PING" else a for a in spec.actions
    )
    violation = check(replace(spec, actions=actions)).violation
    assert violation is not None
    assert violation.property == "registered_producer_eventually_discoverable"


# -- the transition functions -------------------------------------------------------------


def start(config: str = "two_nsqds") -> State:
    return lr.initial_state(lr.CONFIGS[config])


def identified(state: State, *peers: Peer) -> State:
    for peer in peers:
        state = lr.identify(lr.connect(state, peer), peer, NO_FAULTS)
    return state


def register(state: State, peer: Peer, topic: str, channel: str | None = None) -> State:
    return lr.register(state, peer, topic, channel, NO_FAULTS)


def unregister(state: State, peer: Peer, topic: str, channel: str | None = None) -> State:
    return lr.unregister(state, peer, topic, channel, NO_FAULTS)


def producers(state: State, topic: str) -> tuple[Peer, ...]:
    found = lr.lookup(state, topic)
    assert found is not None
    return found.producers


def test_lookup_of_an_unknown_topic_is_404() -> None:
    assert lr.lookup(identified(start(), N0A), "t") is None


def test_register_with_a_channel_registers_the_topic_too() -> None:
    state = register(identified(start(), N0A, N1A), N0A, "t", "c")
    state = register(state, N1A, "t")
    assert lr.lookup(state, "t") == Lookup(("c",), (N0A, N1A))
    assert lr.topics(state) == ("t",)
    assert lr.nodes(state) == ((N0A, (("t", False),)), (N1A, (("t", False),)))


def test_unregister_channel_keeps_the_topic_and_the_channel_key() -> None:
    state = unregister(register(identified(start(), N0A), N0A, "t", "c"), N0A, "t", "c")
    assert lr.lookup(state, "t") == Lookup(("c",), (N0A,))


def test_unregister_of_the_last_producer_of_an_ephemeral_channel_drops_the_key() -> None:
    state = register(identified(start(), N0A, N1A), N0A, "t", "e#ephemeral")
    state = register(state, N1A, "t", "e#ephemeral")
    state = unregister(state, N0A, "t", "e#ephemeral")
    assert lr.lookup(state, "t") == Lookup(("e#ephemeral",), (N0A, N1A))
    state = unregister(state, N1A, "t", "e#ephemeral")
    assert lr.lookup(state, "t") == Lookup((), (N0A, N1A))


def test_close_removes_every_registration_but_keeps_the_keys() -> None:
    state = register(identified(start(), N0A), N0A, "t", "e#ephemeral")
    state = lr.close(state, N0A, NO_FAULTS)
    assert state.db.producers == frozenset()
    # Even the #ephemeral channel key stays: only UNREGISTER removes it.
    assert lr.lookup(state, "t") == Lookup(("e#ephemeral",), ())
    assert lr.nodes(state) == ()


def test_unregister_of_an_ephemeral_topic_drops_the_topic_key_not_its_channels() -> None:
    state = register(identified(start("reconnect"), N0A), N0A, "t#ephemeral", "c")
    state = unregister(state, N0A, "t#ephemeral")
    assert lr.lookup(state, "t#ephemeral") is None
    assert state.db.keys == {lr.CLIENT_KEY, lr.channel_key("t#ephemeral", "c")}


def test_inactive_producer_is_hidden_until_it_pings() -> None:
    state = register(identified(start(), N0A), N0A, "t")
    state = lr.inactive_timeout(state, N0A)
    assert producers(state, "t") == ()
    assert lr.nodes(state) == ()
    state = lr.ping(state, N0A, NO_FAULTS)
    assert producers(state, "t") == (N0A,)


def test_tombstone_hides_the_producer_until_it_expires() -> None:
    state = register(identified(start(), N0A, N1A), N0A, "t")
    state = register(state, N1A, "t")
    state = lr.tombstone_topic_producer(state, "t", 0, NO_FAULTS)
    assert producers(state, "t") == (N1A,)
    assert lr.nodes(state)[0] == (N0A, (("t", True),))
    state = lr.tombstone_expires(state, N0A, "t")
    assert producers(state, "t") == (N0A, N1A)


def test_register_again_does_not_clear_a_tombstone_but_unregister_then_register_does() -> None:
    state = register(identified(start(), N0A), N0A, "t")
    state = lr.tombstone_topic_producer(state, "t", 0, NO_FAULTS)
    assert producers(register(state, N0A, "t", "c"), "t") == ()
    state = register(unregister(state, N0A, "t"), N0A, "t")
    assert producers(state, "t") == (N0A,)


def test_tombstone_names_a_node_and_marks_every_connection_of_it() -> None:
    state = identified(start("reconnect"), N0A, N0B, N1A)
    for peer in (N0A, N0B, N1A):
        state = register(state, peer, "t#ephemeral")
    state = lr.tombstone_topic_producer(state, "t#ephemeral", 0, NO_FAULTS)
    assert producers(state, "t#ephemeral") == (N1A,)
