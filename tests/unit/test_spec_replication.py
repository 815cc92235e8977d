"""The replicated-topic spec (docs/replication.md): every configuration holds, every seeded
fault is rejected by the property it breaks, and single transitions do what the design says
(acknowledgement waits for a replica, an old primary cannot be acknowledged, a takeover
redelivers what was in flight and not what was finished, a returning node's messages are
merged)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spec import Action, Mutant, Spec, check, format_trace
from spec.replication import (
    CANDIDATE,
    CONFIGS,
    FAULTS,
    PRIMARY,
    REPLICA,
    Bounds,
    State,
    build,
    mutants,
    specs,
)

REJECTED_BY = {
    "replication.ack_before_replicated": "an acknowledged message was written by a quorum",
    "replication.takeover_without_epoch": "one primary per epoch, epochs only grow",
    "replication.replica_forgets_fins": "no redelivery of a FIN that reached the replicas",
    "replication.takeover_without_merge": "no redelivery of a FIN that reached the replicas",
    "replication.replica_ignores_epoch": "no redelivery of a FIN that reached the replicas",
    "replication.rejoin_replaces_log": (
        "an acknowledged message is lost only if every node that wrote it lost it unsynced"
    ),
}


@pytest.mark.parametrize("spec", specs(), ids=lambda s: s.name)
def test_each_configuration_holds(spec: Spec) -> None:
    result = check(spec)
    assert result.violation is None, format_trace(spec, result.violation)
    assert result.ok and result.states > 1000


def test_the_configurations_and_mutants() -> None:
    assert [s.name for s in specs()] == [f"replication.{c}" for c in CONFIGS]
    assert sorted(m.name for m in mutants()) == sorted(f"replication.{f}" for f in FAULTS)
    assert sorted(REJECTED_BY) == sorted(m.name for m in mutants())


@pytest.mark.parametrize("mutant", mutants(), ids=lambda m: m.name)
def test_each_mutant_is_rejected_by_the_property_it_breaks(mutant: Mutant) -> None:
    violation = check(mutant.spec).violation
    assert violation is not None, f"{mutant.name} was not rejected"
    assert violation.property == REJECTED_BY[mutant.name], format_trace(mutant.spec, violation)


# -- single transitions ---------------------------------------------------------------------


def enabled(spec: Spec, state: State) -> dict[str, State]:
    return {label: after for a in spec.actions for label, after in a.instances(state)}


def take(spec: Spec, state: State, label: str) -> State:
    instances = enabled(spec, state)
    assert label in instances, f"{label} not enabled; enabled: {sorted(instances)}"
    return instances[label]


def run(spec: Spec, *labels: str) -> State:
    state: State = next(iter(spec.init()))
    for label in labels:
        state = take(spec, state, label)
    return state


# Every budget at once (too many states to explore, fine for single transitions).
THREE = build("replication.transitions", Bounds())


def test_the_ok_waits_for_a_replica() -> None:
    state = run(THREE, "publish(n0, m0)")
    assert "acknowledge(n0, m0)" not in enabled(THREE, state)
    state = take(THREE, state, "replicate(n0→n1, m0) ack lost")
    assert 0 in state.nodes[1].log
    assert "acknowledge(n0, m0)" not in enabled(THREE, state)  # the primary does not know
    state = take(THREE, state, "replicate(n0→n1, m0)")  # sent again, written once
    state = take(THREE, state, "acknowledge(n0, m0)")
    assert state.ghost.acked == {0}


def test_an_old_primary_cannot_get_a_publish_acknowledged() -> None:
    state = run(THREE, "suspect(n1) falsely", "promise(n2→n1)")
    assert state.nodes[1].role == PRIMARY and state.nodes[1].epoch == (2, 1)
    assert state.nodes[0].role == PRIMARY  # cut off, it does not know yet
    state = take(THREE, state, "publish(n0, m0)")
    labels = enabled(THREE, state)
    assert not [label for label in labels if label.startswith("replicate(n0→")]
    assert "acknowledge(n0, m0)" not in labels
    state = take(THREE, state, "step_down(n0, e2.1)")
    assert state.nodes[0].role == REPLICA and not state.nodes[0].pending
    # It joins the new primary, which adopts the message it holds (never acknowledged).
    state = take(THREE, state, "join(n0→n1)")
    assert state.nodes[1].log == {0} and 0 in state.nodes[1].members


def test_a_takeover_delivers_again_what_was_in_flight_not_what_was_finished() -> None:
    state = run(
        THREE,
        "publish(n0, m0)",
        "replicate(n0→n1, m0)",
        "acknowledge(n0, m0)",
        "publish(n0, m1)",
        "replicate(n0→n1, m1)",
        "acknowledge(n0, m1)",
        "deliver(n0, m0)",
        "deliver(n0, m1)",
        "finish(n0, m0)",
        "replicate_fins(n0→n1, {m0})",
        "crash(n0)",
        "suspect(n2)",
    )
    assert state.nodes[2].role == CANDIDATE and state.nodes[2].epoch == (2, 2)
    state = take(THREE, state, "promise(n1→n2)")
    new = state.nodes[2]
    assert new.role == PRIMARY and new.log == {0, 1} and new.finished == {0}
    deliveries = [label for label in enabled(THREE, state) if label.startswith("deliver(")]
    assert deliveries == ["deliver(n2, m1)"]  # m1 was in flight; m0's FIN reached n1


def test_a_fin_still_in_the_batch_is_delivered_again() -> None:
    state = run(
        THREE,
        "publish(n0, m0)",
        "replicate(n0→n1, m0)",
        "replicate(n0→n2, m0)",
        "acknowledge(n0, m0)",
        "deliver(n0, m0)",
        "finish(n0, m0)",
        "crash(n0)",
        "suspect(n1)",
        "promise(n2→n1)",
    )
    assert "deliver(n1, m0)" in enabled(THREE, state)


def test_an_old_primary_returns_as_a_replica_and_its_messages_are_merged() -> None:
    state = run(THREE, "publish(n0, m0)", "crash(n0)", "suspect(n1)", "promise(n2→n1)")
    assert 0 not in state.nodes[1].log  # never acknowledged, only n0 has it
    state = take(THREE, state, "restart(n0)")
    assert state.nodes[0].role == REPLICA and state.nodes[0].epoch == (1, 0)
    assert "suspect(n0)" not in enabled(THREE, state)  # it sees the primary: it joins
    state = take(THREE, state, "join(n0→n1)")
    assert state.nodes[0].epoch == (2, 1) and state.nodes[1].log == {0}


def test_the_higher_ballot_wins_a_concurrent_election() -> None:
    # n2 stands too before it hears n1's PREPARE (to the model, a wrong suspicion).
    state = run(THREE, "crash(n0)", "suspect(n1)", "suspect(n2) falsely")
    assert {state.nodes[1].epoch, state.nodes[2].epoch} == {(2, 1), (2, 2)}
    labels = enabled(THREE, state)
    assert "promise(n2→n1)" not in labels and "promise(n1→n2)" in labels
    state = take(THREE, state, "promise(n1→n2)")
    assert state.nodes[2].role == PRIMARY and state.nodes[1].role == REPLICA


def test_two_nodes_cannot_fail_over_without_the_other() -> None:
    """With two members the quorum is both: if a crashed node may stay down forever, an
    acknowledged message may never be finished (docs/replication.md, section 8)."""
    bounds = replace(CONFIGS["two_nodes"], fair_restart=False, suspicions=0, losses=0)
    violation = check(build("two_nodes_unfair_restart", bounds)).violation
    assert violation is not None
    assert violation.property == "every acknowledged message is eventually finished"


def test_liveness_is_not_vacuous() -> None:
    """Without fair delivery an acknowledged message may never be finished."""
    spec = build("unfair", replace(CONFIGS["crash"], crashes=0))
    actions = tuple(
        Action(a.name, a.instances, fair=False) if a.name == "deliver" else a for a in spec.actions
    )
    violation = check(replace(spec, actions=actions)).violation
    assert violation is not None and violation.kind == "liveness"


def test_bounds_quorum() -> None:
    assert Bounds(nodes=3).quorum == 2 and Bounds(nodes=2).quorum == 2


def test_an_old_primary_cut_off_may_deliver_again_which_is_a_duplicate_not_a_loss() -> None:
    """Time is abstract, so no lease stops the old primary: it may deliver a message the new
    primary has finished (a duplicate the lease avoids in practice), and the properties allow
    it; it cannot finish anything for the others, and it steps down when it meets them."""
    state = run(
        THREE,
        "publish(n0, m0)",
        "replicate(n0→n1, m0)",
        "acknowledge(n0, m0)",
        "suspect(n1) falsely",
        "promise(n2→n1)",
        "deliver(n1, m0)",
        "finish(n1, m0)",
        "replicate_fins(n1→n2, {m0})",
    )
    assert state.nodes[1].finished == state.nodes[2].finished == {0}
    after = take(THREE, state, "deliver(n0, m0)")
    for invariant in THREE.step_invariants:
        assert invariant.holds(state, "deliver(n0, m0)", after) is True
    after = take(THREE, take(THREE, after, "step_down(n0, e2.1)"), "join(n0→n1)")
    assert after.nodes[0].role == REPLICA and not after.nodes[0].in_flight
    assert "deliver(n1, m0)" not in enabled(THREE, after)
