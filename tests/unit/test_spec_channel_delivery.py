"""The channel delivery spec: each configuration holds, each mutant is rejected by the
property its fault breaks, and the transitions do what NSQ does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spec import Mutant, Spec, check
from spec.channel_delivery import (
    DURABLE,
    FAULTS,
    MEMORY,
    Bounds,
    DeliveryState,
    age,
    build,
    crash,
    dead_letter,
    dead_letter_refused,
    deliver,
    disconnect,
    expire,
    expire_ttl,
    finish,
    initial_state,
    mutants,
    publish,
    rdy,
    requeue,
    restart,
    specs,
    subscribe,
)

_LIVENESS = "every acknowledged message is eventually finished, dead-lettered or expired"

EXPECTED_PROPERTY = {
    "stale_fin_accepted": "FIN succeeds only for the current delivery",
    "in_flight_dropped_on_disconnect": "messages are lost only by a crash of the memory queue",
    "rdy_not_enforced": "the RDY window is never exceeded",
    "attempts_reset_on_requeue": "attempts only grow",
    "expired_stays_in_flight": "each message is in exactly one place",
    "restart_loses_in_flight": "messages are lost only by a crash of the memory queue",
    "crash_loses_in_flight": "messages are lost only by a crash of the memory queue",
    "orphans_never_expire": _LIVENESS,
    "delivered_beyond_max_attempts": "a message is delivered at most max_attempts times",
    "dead_letter_dropped": "messages are lost only by a crash of the memory queue",
    "refused_dead_letter_dropped": "messages are lost only by a crash of the memory queue",
    "dead_letter_never_moved": _LIVENESS,
    "expired_delivered": "a message past its TTL is never delivered",
    "expired_dropped_when_dead_lettering": (
        "a channel that dead-letters moves expired messages, never drops them"
    ),
}


@pytest.mark.parametrize("spec", specs(), ids=lambda s: s.name)
def test_each_configuration_holds(spec: Spec) -> None:
    result = check(spec)
    assert result.ok, result.violation
    assert result.states > 1000


def test_every_fault_has_a_mutant() -> None:
    assert {m.name.split(".", 1)[1] for m in mutants()} == set(FAULTS) == set(EXPECTED_PROPERTY)


@pytest.mark.parametrize("mutant", mutants(), ids=lambda m: m.name)
def test_each_mutant_is_rejected_by_the_property_it_breaks(mutant: Mutant) -> None:
    violation = check(mutant.spec).violation
    assert violation is not None
    assert violation.property == EXPECTED_PROPERTY[mutant.name.split(".", 1)[1]]


def step(bounds: Bounds, state: DeliveryState, action: object, label: str) -> DeliveryState:
    """Take the instance of `action` named `label` (which must be enabled)."""
    instances = dict(action(bounds, state))  # type: ignore[operator]
    assert label in instances, f"{label} not enabled; enabled: {sorted(instances)}"
    return instances[label]


def delivered_to_c0(bounds: Bounds) -> DeliveryState:
    state = initial_state(bounds)
    state = step(bounds, state, publish, "publish(m0)")
    state = step(bounds, state, subscribe, "subscribe(c0)")
    state = step(bounds, state, rdy, "rdy(c0, 1)")
    return step(bounds, state, deliver, "deliver(c0, m0)")


def test_fin_after_a_timeout_and_redelivery_elsewhere_is_refused() -> None:
    bounds = Bounds()
    state = delivered_to_c0(bounds)
    state = step(bounds, state, expire, "expire(c0, m0)")
    state = step(bounds, state, subscribe, "subscribe(c1)")
    state = step(bounds, state, rdy, "rdy(c1, 1)")
    state = step(bounds, state, deliver, "deliver(c1, m0)")
    assert state.channels[0].attempts == (2,)
    after = step(bounds, state, finish, "finish(c0, m0) E_FIN_FAILED")
    assert after.clients[1].in_flight == {0} and not after.channels[0].finished
    assert "finish(c0, m0)" not in dict(finish(bounds, state))


def test_a_disconnected_clients_messages_stay_in_flight_until_they_expire() -> None:
    bounds = Bounds()
    state = step(bounds, delivered_to_c0(bounds), disconnect, "disconnect(c0)")
    assert state.channels[0].orphans == {0} and not state.channels[0].queued


def test_window_of_one_delivers_one_message_at_a_time() -> None:
    bounds = Bounds()
    state = step(bounds, delivered_to_c0(bounds), publish, "publish(m1)")
    assert not list(deliver(bounds, state))


@pytest.mark.parametrize(
    ("mode", "lost"), [(MEMORY, frozenset({0})), (DURABLE, frozenset())], ids=["memory", "durable"]
)
def test_a_crash_loses_in_flight_messages_only_in_memory(mode: str, lost: frozenset[int]) -> None:
    bounds = Bounds(mode=mode)
    state = step(bounds, delivered_to_c0(bounds), crash, "crash")
    assert state.channels[0].lost == lost
    assert state.channels[0].queued == frozenset({0}) - lost
    assert not any(c.connected for c in state.clients)


def test_a_graceful_restart_keeps_everything_in_either_mode() -> None:
    bounds = Bounds(mode=MEMORY)
    state = step(bounds, delivered_to_c0(bounds), restart, "restart")
    assert state.channels[0].queued == {0} and not state.channels[0].lost


def test_without_fair_delivery_a_queued_message_may_never_be_finished() -> None:
    spec = build("unfair", Bounds(restarts=0, crashes=0, timeouts=0, requeues=0))
    actions = tuple(replace(a, fair=False) if a.name == "deliver" else a for a in spec.actions)
    violation = check(replace(spec, actions=actions)).violation
    assert violation is not None and violation.kind == "liveness"


# -- --max-attempts: dead-lettering -----------------------------------------------------------


def test_past_max_attempts_a_message_is_moved_not_delivered() -> None:
    bounds = Bounds(mode=DURABLE, max_attempts=1, refusals=1)
    state = step(bounds, delivered_to_c0(bounds), requeue, "requeue(c0, m0, 0)")
    assert state.channels[0].queued == {0} and state.channels[0].attempts == (1,)
    assert not list(deliver(bounds, state))
    refused = step(bounds, state, dead_letter_refused, "dead_letter(ch0, m0) refused")
    assert refused.channels[0].queued == {0} and not refused.channels[0].lost
    moved = step(bounds, refused, dead_letter, "dead_letter(ch0, m0)")
    assert moved.channels[0].dead == {0} and not moved.channels[0].queued
    # Dead-lettered is done with, as finished: nothing is pending any more.
    crashed = step(bounds, moved, crash, "crash")
    assert crashed.channels[0].dead == {0} and not crashed.channels[0].lost


def test_without_max_attempts_nothing_is_dead_lettered() -> None:
    bounds = Bounds()
    state = step(bounds, delivered_to_c0(bounds), requeue, "requeue(c0, m0, 0)")
    assert not list(dead_letter(bounds, state))
    assert "deliver(c0, m0)" in dict(deliver(bounds, state))


# -- --message-ttl --------------------------------------------------------------------------


@pytest.mark.parametrize(("max_attempts", "place"), [(0, "expired"), (2, "dead")])
def test_an_old_message_is_not_delivered_but_dropped_or_moved(
    max_attempts: int, place: str
) -> None:
    bounds = Bounds(mode=DURABLE, ttl=True, ages=1, max_attempts=max_attempts)
    state = initial_state(bounds)
    state = step(bounds, state, publish, "publish(m0)")
    state = step(bounds, state, subscribe, "subscribe(c0)")
    state = step(bounds, state, rdy, "rdy(c0, 1)")
    state = step(bounds, state, age, "age(m0)")
    assert not list(deliver(bounds, state))
    after = step(bounds, state, expire_ttl, "expire_ttl(ch0, m0)")
    assert getattr(after.channels[0], place) == {0} and not after.channels[0].queued
