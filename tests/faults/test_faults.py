"""The fault suite's short run (CI): one trial of each of a few faults against three nsqd
processes replicating a topic under load (tests/faults/README.md; ``bench/faults`` is the
long run and prints the figures).

Each trial asserts what must hold whatever the timing: no acknowledged message lost, no
corrupt or never-published body delivered, never two primaries in one epoch, the set back to
one primary with every member in its epoch, publishing resumed within 30 s, and the members'
replication traces replayed against the spec without a step it does not allow
(spec/trace_check.py). Failover times and duplicates are printed (the ``FAULT-TRIAL`` line,
``pytest -s``), not asserted: this machine is shared and its timing noisy.
"""

from __future__ import annotations

import pytest

from .checker import trial_line
from .trial import TrialOptions, Unavailable, run_trial

#: (scenario, seed): kill -9 of the primary and of a replica, SIGSTOP of the primary beyond
#: its lease, the primary cut off from everyone, a replica's log damaged, a replica's data
#: wiped, and a power cut of every member with --sync-ack.
CI_TRIALS = [
    ("kill-primary", 1),
    ("kill-replica", 1),
    ("stop-primary-6s", 1),
    ("isolate-primary", 1),
    ("flip-log", 1),
    ("wipe", 1),
    ("power-cut", 1),
]

RESUMED_WITHIN = 30.0


def problems(figures: dict[str, object]) -> list[str]:
    """What a trial's figures break of the suite's invariants."""
    found = []
    if figures.get("error"):
        found.append(f"the trial failed: {figures['error']}")
    if figures.get("lost"):
        found.append(
            f"{figures['lost']} acknowledged messages lost, e.g. seqs {figures['lost_examples']}"
        )
    if figures.get("corrupt"):
        found.append(
            f"{figures['corrupt']} corrupt bodies delivered, e.g. {figures['corrupt_examples']}"
        )
    if figures.get("never_published"):
        found.append(f"{figures['never_published']} bodies delivered that nobody published")
    if figures.get("two_primaries"):
        found.append(f"two primaries in epochs {figures['two_primaries']}")
    if figures.get("trace_violation"):
        found.append(f"the members' traces break the spec: {figures['trace_violation']}")
    if "error" not in figures:
        if figures.get("converged_s") is None:
            found.append("the set did not converge (one primary, every member in its epoch)")
        resumed = figures.get("publish_resumed_s")
        if not isinstance(resumed, int | float) or resumed > RESUMED_WITHIN:
            found.append(f"publishing did not resume within {RESUMED_WITHIN} s ({resumed})")
    return found


@pytest.mark.parametrize(("fault", "seed"), CI_TRIALS, ids=[f for f, _ in CI_TRIALS])
def test_fault(fault: str, seed: int) -> None:
    try:
        result = run_trial(fault, TrialOptions(seed=seed))
    except Unavailable as exc:
        pytest.skip(f"{fault}: {exc}")
    line = trial_line(fault, seed, result.figures)
    print(line)
    found = problems(result.figures)
    assert not found, "\n".join([*found, line, "member logs (tails):", result.logs])
