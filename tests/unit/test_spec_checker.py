"""The model checker on small specs whose answers are known by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spec import Action, Invariant, Liveness, Spec, StepInvariant, check, format_trace


def counter_spec(limit: int = 3, with_reset: bool = False, **overrides: Any) -> Spec:
    """x counts up to `limit` (fairly); with `with_reset`, an unfair Reset sends it back to 0
    from `limit - 1`."""

    def inc(x: int) -> Iterator[tuple[str, int]]:
        if x < limit:
            yield "Inc", x + 1

    def reset(x: int) -> Iterator[tuple[str, int]]:
        if x == limit - 1:
            yield "Reset", 0

    actions = [Action("Inc", inc, fair=True)]
    if with_reset:
        actions.append(Action("Reset", reset))
    fields: dict[str, Any] = {
        "name": "counter",
        "description": "a counter",
        "init": lambda: [0],
        "actions": tuple(actions),
        "invariants": (Invariant("bounded", lambda x: x <= limit),),
    }
    fields.update(overrides)
    return Spec(**fields)


def test_explores_every_state_to_the_bound() -> None:
    result = check(counter_spec())
    assert result.ok
    assert (result.states, result.depth) == (4, 3)


def test_invariant_violation_gives_the_shortest_trace() -> None:
    def two_ways(x: int):
        if x < 5:
            yield "Inc", x + 1
            yield "Jump", x + 2

    spec = Spec(
        "jumps",
        "",
        lambda: [0],
        (Action("Move", two_ways),),
        invariants=(Invariant("below four", lambda x: x < 4 or f"x is {x}"),),
    )
    result = check(spec)
    violation = result.violation
    assert violation is not None and violation.kind == "invariant"
    assert [label for label, _ in violation.trace] == [None, "Jump", "Jump"]
    assert violation.reason == "x is 4"
    text = format_trace(spec, violation)
    assert "  1. Jump" in text and "  2. Jump" in text and "below four" in text


def test_step_invariant_names_the_transition() -> None:
    spec = counter_spec(
        with_reset=True,
        step_invariants=(StepInvariant("only grows", lambda a, label, b: b >= a),),
    )
    violation = check(spec).violation
    assert violation is not None and violation.kind == "step invariant"
    assert [label for label, _ in violation.trace] == [None, "Inc", "Inc", "Reset"]


def test_liveness_holds_under_weak_fairness() -> None:
    spec = counter_spec(liveness=(Liveness("reaches the limit", lambda x: [1] if x < 3 else []),))
    assert check(spec).ok


def test_liveness_fails_when_the_progress_action_is_not_fair() -> None:
    def inc(x: int):
        if x < 3:
            yield "Inc", x + 1

    spec = counter_spec(
        actions=(Action("Inc", inc, fair=False),),
        liveness=(Liveness("reaches the limit", lambda x: ["done"] if x < 3 else []),),
    )
    violation = check(spec).violation
    assert violation is not None and violation.kind == "liveness"
    # The shortest bad behaviour stutters in the initial state.
    assert len(violation.trace) == 1 and violation.loop_to == 0
    assert "stuttering" in format_trace(spec, violation)


def test_liveness_fails_on_a_fair_cycle() -> None:
    # Inc is fair but Reset may always win the race at 2: weak fairness allows 0,1,2,0,...
    spec = counter_spec(
        with_reset=True,
        liveness=(Liveness("reaches the limit", lambda x: ["done"] if x < 3 else []),),
    )
    violation = check(spec).violation
    assert violation is not None and violation.kind == "liveness"
    labels = [label for label, _ in violation.trace]
    assert labels == [None, "Inc", "Inc", "Reset"]
    assert violation.loop_to == 0


def test_a_cycle_that_starves_a_continuously_enabled_fair_action_is_not_a_counterexample() -> None:
    # Toggle flips a bit forever (unfair); Finish is fair and enabled in both states, so a fair
    # behaviour must take it: liveness holds.
    def toggle(s: tuple[int, bool]):
        if not s[1]:
            yield "Toggle", (1 - s[0], False)

    def finish(s: tuple[int, bool]):
        if not s[1]:
            yield "Finish", (s[0], True)

    spec = Spec(
        "toggle",
        "",
        lambda: [(0, False)],
        (Action("Toggle", toggle), Action("Finish", finish, fair=True)),
        liveness=(Liveness("finishes", lambda s: [] if s[1] else ["finish"]),),
    )
    assert check(spec).ok


def test_state_limit_makes_the_result_incomplete() -> None:
    def inc(x: int):
        yield "Inc", x + 1

    result = check(Spec("unbounded", "", lambda: [0], (Action("Inc", inc),)), max_states=100)
    assert not result.ok and not result.complete and result.violation is None
