"""The bounded explicit-state model checker: breadth-first over every interleaving, states
hashed, invariants checked on each new state and step invariants on each transition; then
liveness under weak fairness on the whole state graph. A violation comes back with the shortest
trace that shows it (for liveness: the shortest way into a fair cycle, then the cycle).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from .core import Label, Spec, State, failure

DEFAULT_MAX_STATES = 3_000_000


@dataclass
class Violation:
    """What failed, and the behaviour that shows it: ``trace[0]`` is an initial state, each
    later entry the action taken and the state it led to. For liveness, the behaviour goes on
    forever: from the state at index `loop_to` it repeats (or stutters, when `loop_to` is the
    last index and the state has no fair action enabled)."""

    kind: str  # "invariant", "step invariant" or "liveness"
    property: str
    reason: str
    trace: list[tuple[Label | None, State]]
    loop_to: int | None = None


@dataclass
class Result:
    spec: Spec
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    complete: bool = True
    violation: Violation | None = None

    @property
    def ok(self) -> bool:
        return self.complete and self.violation is None


@dataclass
class _Graph:
    """The explored state space: states numbered in breadth-first order."""

    states: list[State] = field(default_factory=list)
    ids: dict[State, int] = field(default_factory=dict)
    parent: list[int] = field(default_factory=list)
    via: list[Label | None] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    # Per state: (label, successor id) for every enabled instance. Kept only for liveness.
    edges: list[list[tuple[Label, int]]] = field(default_factory=list)
    fair_labels: set[Label] = field(default_factory=set)

    def add(self, state: State, parent: int, label: Label | None) -> int:
        index = len(self.states)
        self.ids[state] = index
        self.states.append(state)
        self.parent.append(parent)
        self.via.append(label)
        self.depth.append(self.depth[parent] + 1 if parent >= 0 else 0)
        return index

    def path_to(self, index: int) -> list[tuple[Label | None, State]]:
        steps = []
        while index >= 0:
            steps.append((self.via[index], self.states[index]))
            index = self.parent[index]
        steps.reverse()
        return steps


def check(spec: Spec, max_states: int = DEFAULT_MAX_STATES) -> Result:
    """Explore `spec` to its bounds; stop at the first violation."""
    started = time.perf_counter()
    result = Result(spec)
    graph = _Graph()
    keep_edges = bool(spec.liveness)
    result.violation = _explore(spec, graph, keep_edges, max_states)
    result.states = len(graph.states)
    result.depth = max(graph.depth, default=0)
    result.transitions = sum(len(e) for e in graph.edges) if keep_edges else -1
    if len(graph.states) >= max_states and result.violation is None:
        result.complete = False
    elif result.violation is None and keep_edges:
        for prop in spec.liveness:
            result.violation = _check_liveness(graph, prop.name, prop.pending)
            if result.violation is not None:
                break
    result.seconds = time.perf_counter() - started
    return result


def _explore(spec: Spec, graph: _Graph, keep_edges: bool, max_states: int) -> Violation | None:
    invariants = [(inv.name, inv.holds) for inv in spec.invariants]
    step_invariants = [(inv.name, inv.holds) for inv in spec.step_invariants]
    actions = [(a.instances, a.fair) for a in spec.actions]
    fair_labels = graph.fair_labels

    def check_state(index: int) -> Violation | None:
        state = graph.states[index]
        for name, holds in invariants:
            reason = failure(holds(state))
            if reason is not None:
                return Violation("invariant", name, reason, graph.path_to(index))
        return None

    for state in spec.init():
        if state not in graph.ids:
            violation = check_state(graph.add(state, -1, None))
            if violation:
                return violation
            graph.edges.append([])
    ids = graph.ids
    index = 0
    while index < len(graph.states) and len(graph.states) < max_states:
        state = graph.states[index]
        edges = graph.edges[index] if keep_edges else None
        for instances, fair in actions:
            for label, after in instances(state):
                if fair and keep_edges:
                    fair_labels.add(label)
                for name, holds in step_invariants:
                    reason = failure(holds(state, label, after))
                    if reason is not None:
                        trace = [*graph.path_to(index), (label, after)]
                        return Violation("step invariant", name, reason, trace)
                target = ids.get(after)
                if target is None:
                    target = graph.add(after, index, label)
                    if keep_edges:
                        graph.edges.append([])
                    violation = check_state(target)
                    if violation:
                        return violation
                if edges is not None:
                    edges.append((label, target))
        index += 1
    return None


# -- liveness -------------------------------------------------------------------------------


def _check_liveness(
    graph: _Graph, name: str, pending_of: Callable[[State], Iterable[Hashable]]
) -> Violation | None:
    """For each obligation, look for a fair behaviour on which it stays open forever: a state
    where it is open and no fair action is enabled (the system may stutter there), or a cycle of
    states where it is open that is fair to every fair action instance."""
    pending: list[frozenset[Hashable]] = [frozenset(pending_of(s)) for s in graph.states]
    obligations: set[Hashable] = set().union(*pending) if pending else set()
    fair_enabled = [
        frozenset(label for label, _ in edges if label in graph.fair_labels)
        for edges in graph.edges
    ]
    # Check obligations in a stable order so that the reported counterexample is reproducible.
    for obligation in sorted(obligations, key=repr):
        nodes = [i for i, open_ in enumerate(pending) if obligation in open_]
        stuck = [i for i in nodes if not fair_enabled[i]]
        if stuck:
            at = min(stuck, key=lambda i: graph.depth[i])
            trace = graph.path_to(at)
            reason = f"{obligation!r} stays open: nothing fair is enabled, the system stutters"
            return Violation("liveness", name, reason, trace, loop_to=len(trace) - 1)
        members = set(nodes)
        for component in _cycles(graph, nodes, members):
            violation = _fair_cycle(graph, component, fair_enabled, name, obligation)
            if violation:
                return violation
    return None


def _cycles(graph: _Graph, nodes: list[int], members: set[int]) -> Iterable[set[int]]:
    """The strongly connected components of the subgraph on `members` that contain a cycle
    (iterative Tarjan)."""
    index_of: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    counter = 0
    for root in nodes:
        if root in index_of:
            continue
        work = [(root, 0)]
        while work:
            node, edge_pos = work.pop()
            if edge_pos == 0:
                index_of[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            edges = graph.edges[node]
            recurse = False
            while edge_pos < len(edges):
                target = edges[edge_pos][1]
                edge_pos += 1
                if target not in members:
                    continue
                if target not in index_of:
                    work.append((node, edge_pos))
                    work.append((target, 0))
                    recurse = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index_of[target])
            if recurse:
                continue
            if low[node] == index_of[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or any(t == node for _, t in graph.edges[node]):
                    yield component
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])


def _fair_cycle(
    graph: _Graph,
    component: set[int],
    fair_enabled: list[frozenset[Label]],
    name: str,
    obligation: Hashable,
) -> Violation | None:
    """A violation if a behaviour can loop through all of `component` fairly: every fair
    instance enabled in all of its states is also taken inside it."""
    inside: dict[Label, tuple[int, int]] = {}
    for node in component:
        for label, target in graph.edges[node]:
            if target in component:
                inside.setdefault(label, (node, target))
    always = frozenset.intersection(*(fair_enabled[n] for n in component))
    if not always <= inside.keys():
        return None
    entry = min(component, key=lambda n: graph.depth[n])
    # Build the loop: from the entry through a witness for each fair instance enabled somewhere
    # in the component (a state where it is disabled, or an edge that takes it), then back.
    sometimes = frozenset().union(*(fair_enabled[n] for n in component))
    waypoints: list[tuple[int, int | None]] = []  # (state to reach, then edge target or None)
    for label in sorted(sometimes):
        disabled = [n for n in component if label not in fair_enabled[n]]
        if disabled:
            waypoints.append((min(disabled), None))
        else:
            waypoints.append(inside[label])
    trace = graph.path_to(entry)
    loop_to = len(trace) - 1
    here = entry
    for waypoint, then in waypoints:
        trace += _path_within(graph, component, here, waypoint)
        here = waypoint
        if then is not None:
            label = next(lb for lb, t in graph.edges[here] if t == then and lb in inside)
            trace.append((label, graph.states[then]))
            here = then
    trace += _path_within(graph, component, here, entry, nonempty=not waypoints)
    reason = f"{obligation!r} stays open forever on a fair cycle"
    return Violation("liveness", name, reason, trace, loop_to=loop_to)


def _path_within(
    graph: _Graph, component: set[int], start: int, goal: int, nonempty: bool = False
) -> list[tuple[Label | None, State]]:
    """Shortest steps from `start` to `goal` inside `component` (at least one step when
    `nonempty`)."""
    if start == goal and not nonempty:
        return []
    came: dict[int, tuple[int, Label]] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for label, target in graph.edges[node]:
            if target not in component or target in came:
                continue
            came[target] = (node, label)
            if target == goal:
                steps: list[tuple[Label | None, State]] = []
                while True:
                    prev, via = came[target]
                    steps.append((via, graph.states[target]))
                    target = prev
                    if target == start:
                        break
                steps.reverse()
                return steps
            queue.append(target)
    raise AssertionError("no path inside a strongly connected component")


# -- reporting ------------------------------------------------------------------------------


def format_trace(spec: Spec, violation: Violation) -> str:
    """The counterexample as a numbered list of actions and states."""
    lines = [f"{violation.kind} {violation.property!r} violated: {violation.reason}"]
    for number, (label, state) in enumerate(violation.trace):
        marker = ""
        if violation.loop_to is not None and number == violation.loop_to:
            marker = "   <- the behaviour loops back to here"
        lines.append(f"  {number:>3}. {label or 'Init'}{marker}")
        lines.extend("       " + line for line in spec.show(state).splitlines())
    if violation.loop_to is not None:
        if violation.loop_to == len(violation.trace) - 1:
            lines.append("       ... and stays in this state forever (stuttering)")
        else:
            lines.append(f"       ... and repeats from step {violation.loop_to} forever")
    return "\n".join(lines)
