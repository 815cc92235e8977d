"""The language of the specs: a spec is initial states, actions, invariants and liveness
properties, in the manner of TLA+.

- A state is any hashable, immutable value (the specs use NamedTuples of tuples and frozensets).
- An action has a name and a function from a state to its enabled instances: each instance is a
  label (the action with its parameters, e.g. ``FIN(c1, m0)``) and the state it leads to. An
  action with several outcomes from one state (nondeterminism) yields several instances.
- Weak fairness is per instance: a fair instance that stays enabled is eventually taken.
- Invariants hold in every reachable state; step invariants hold on every transition
  (TLA+'s ``[][P]_vars``: the state before, the label, the state after).
- A liveness property names obligations: ``pending(state)`` is the set of obligations open in a
  state, and each must eventually close on every fair behaviour (``o ∈ pending ~> o ∉ pending``).

Mutants are the same spec built with a deliberate fault; the checker must reject each.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

State = Any
"""A spec's state: hashable and immutable."""

Label = str
"""An action instance: the action's name and its parameters, e.g. ``FIN(c1, m0)``."""


@dataclass(frozen=True)
class Action:
    """A kind of step. `instances(state)` yields ``(label, next_state)`` for every enabled
    instance; an action that is not enabled yields nothing."""

    name: str
    instances: Callable[[State], Iterable[tuple[Label, State]]]
    fair: bool = False


@dataclass(frozen=True)
class Invariant:
    """A predicate on states: `holds(state)` is True or a short reason it fails."""

    name: str
    holds: Callable[[State], bool | str]


@dataclass(frozen=True)
class StepInvariant:
    """A predicate on transitions: `holds(before, label, after)`."""

    name: str
    holds: Callable[[State, Label, State], bool | str]


@dataclass(frozen=True)
class Liveness:
    """Every obligation in `pending(state)` is eventually discharged (leaves the set) on every
    behaviour that is weakly fair to the fair actions."""

    name: str
    pending: Callable[[State], Iterable[Hashable]]


@dataclass(frozen=True)
class Spec:
    """A specification with the bounds that keep its state space finite."""

    name: str
    description: str
    init: Callable[[], Iterable[State]]
    actions: tuple[Action, ...]
    invariants: tuple[Invariant, ...] = ()
    step_invariants: tuple[StepInvariant, ...] = ()
    liveness: tuple[Liveness, ...] = ()
    bounds: Mapping[str, object] = field(default_factory=dict)
    show: Callable[[State], str] = repr
    """How a state is printed in a counterexample trace."""


@dataclass(frozen=True)
class Mutant:
    """A spec with a seeded fault that the checker must reject."""

    name: str
    description: str
    spec: Spec


def failure(value: bool | str) -> str | None:
    """None when a predicate held (returned True), else why it failed: the string it returned,
    or "does not hold" for False."""
    if value is True:
        return None
    return (value or "does not hold") if isinstance(value, str) else "does not hold"
