"""The checker: what a trial's `History` says about the system under test.

Per trial (`check`), one dict of figures, printed as one ``FAULT-TRIAL {json}`` line:

- ``lost``: acknowledged (``OK``) and not delivered by the end, after the drain, on every
  channel of the trial (must be 0; ``lost_by_channel``);
- ``corrupt``: deliveries whose body fails its hash (must be 0), ``never_published``: intact
  bodies no publisher sent (must be 0), ``unacked_delivered``: delivered, published, but
  never acknowledged (fine: the publisher got an error or no answer);
- ``duplicates`` and what follows are about the channel consumed all along (a trial of a
  data fault has a second one, consumed only at the drain, counted in ``lost`` and
  ``corrupt``): deliveries beyond a body's first; ``dup_per_failover``: those made in each
  epoch after the first (each new epoch is a failover; a delivery's epoch is its member's, from
  the polls around it), ``dup_bound``: the documented bound for each (docs/replication.md
  section 3: the RDY window in flight at the old primary, plus what the old primary delivered
  from `FIN_WINDOW` before the fault on, whose FINs may not have reached a replica);
- ``two_primaries``: epochs in which two members were seen primary (must be none);
  ``non_primary_deliveries``: deliveries by a member that was not the primary, by the polls
  around them: its last poll before and its first poll after both say it is not primary, or
  the first poll after says so while another member was already seen primary in a newer
  epoch `TOLERANCE` before the delivery (a deposed primary still delivering). Messages read on
  a connection that was open across a cut of that member's client link are not counted (they
  may have been sent before the cut, while it was primary);
- ``failover_s``: per fault of the primary, from the fault to the first delivery by a member
  that the poll after it shows primary of a newer epoch than the one at the fault;
  ``publish_resumed_s``: from the (last) fault being in place (every victim killed, stopped
  or cut off) to the first ``OK`` of a publish sent after that.
- ``trace_violation`` (`check_traces`, trionsq's nsqd only): the first step of the members'
  replication traces that the spec does not allow (must be none; spec/trace_check.py).

`summarise` prints a table over many trials, per fault kind.
"""

from __future__ import annotations

import bisect
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from .cluster import CHANNEL
from .load import Delivery, History, Sample, check_body

TOLERANCE = 0.2
FIN_WINDOW = 0.2


class _Timeline:
    """One member's polls, answered ones only, searchable by time."""

    def __init__(self, samples: list[Sample]) -> None:
        self.answered = sorted((s for s in samples if s.role is not None), key=lambda s: s.t1)
        self.by_t1 = [s.t1 for s in self.answered]
        self.by_t0 = sorted(self.answered, key=lambda s: s.t0)
        self.t0s = [s.t0 for s in self.by_t0]

    def before(self, t: float) -> Sample | None:
        """The last poll answered before `t`."""
        i = bisect.bisect_left(self.by_t1, t)
        return self.answered[i - 1] if i else None

    def after(self, t: float) -> Sample | None:
        """The first poll sent after `t`."""
        i = bisect.bisect_right(self.t0s, t)
        return self.by_t0[i] if i < len(self.by_t0) else None


def _primary_epochs(timelines: list[_Timeline]) -> list[tuple[float, int, int]]:
    """(first time seen, epoch, member) of each epoch seen with a primary, by time."""
    first: dict[int, tuple[float, int]] = {}
    for member, timeline in enumerate(timelines):
        for s in timeline.answered:
            if s.role == "primary" and s.epoch is not None:
                seen = first.get(s.epoch)
                if seen is None or s.t1 < seen[0]:
                    first[s.epoch] = (s.t1, member)
    return sorted((t, epoch, member) for epoch, (t, member) in first.items())


def _epoch_of(timeline: _Timeline, t: float) -> int | None:
    """The epoch member was primary of when it delivered at `t` (None: not known)."""
    after = timeline.after(t)
    if after is not None and after.role == "primary":
        return after.epoch
    before = timeline.before(t)
    if before is not None and before.role == "primary":
        return before.epoch
    return None


def check(history: History, rdy: int = 50) -> dict[str, Any]:
    with history.lock:
        status = dict(history.status)
        times = dict(history.times)
        deliveries = sorted(history.deliveries, key=lambda d: d.t)
        samples = [list(s) for s in history.samples]
        faults = list(history.faults)
        client_cuts = list(history.client_cuts)
        notes = list(history.notes)
    timelines = [_Timeline(s) for s in samples]
    acked = {seq for seq, st in status.items() if st == "ok"}

    corrupt: list[Delivery] = []
    foreign: list[Delivery] = []
    seq_of: list[int | None] = []
    for d in deliveries:
        checked = check_body(d.body)
        if checked is None:
            corrupt.append(d)
            seq_of.append(None)
        elif checked[0] != history.tag or checked[1] not in status:
            foreign.append(d)
            seq_of.append(None)
        else:
            seq_of.append(checked[1])
    delivered = {seq for seq in seq_of if seq is not None}
    lost_by_channel = {}
    for channel in history.channels:
        on = {seq for d, seq in zip(deliveries, seq_of, strict=True) if d.channel == channel}
        lost_by_channel[channel] = acked - on
    lost = sorted(set().union(*lost_by_channel.values()))
    unacked_delivered = sorted(seq for seq in delivered if status.get(seq) != "ok")

    # The rest is about the channel consumed all along.
    main = [(d, seq) for d, seq in zip(deliveries, seq_of, strict=True) if d.channel == CHANNEL]
    deliveries = [d for d, _ in main]

    # Duplicates, by the epoch they were delivered in.
    seen: set[int] = set()
    dup_by_epoch: Counter[int | None] = Counter()
    duplicates = 0
    for d, seq in main:
        if seq is None:
            continue
        if seq in seen:
            duplicates += 1
            dup_by_epoch[_epoch_of(timelines[d.member], d.t)] += 1
        seen.add(seq)
    epochs = _primary_epochs(timelines)
    failover_epochs = [epoch for _, epoch, _ in epochs[1:]]
    dup_per_failover = [dup_by_epoch.get(epoch, 0) for epoch in failover_epochs]
    dup_first_epoch = dup_by_epoch.get(epochs[0][1], 0) if epochs else 0

    # Two primaries in one epoch.
    primaries_of: dict[int, set[int]] = defaultdict(set)
    for member, timeline in enumerate(timelines):
        for s in timeline.answered:
            if s.role == "primary" and s.epoch is not None:
                primaries_of[s.epoch].add(member)
    two_primaries = sorted(e for e, ms in primaries_of.items() if len(ms) > 1)

    # Deliveries by a member that was not primary.
    def spans_cut(d: Delivery) -> bool:
        return any(
            m == d.member and d.conn_opened < (end if end is not None else float("inf"))
            and d.t >= start
            for m, start, end in client_cuts
        )  # fmt: skip

    non_primary: list[str] = []
    for d in deliveries:
        timeline = timelines[d.member]
        after = timeline.after(d.t)
        if after is None or after.role == "primary":
            continue
        before = timeline.before(d.t)
        known = before.epoch or 0 if before is not None else 0
        newer = [
            (t, e, m) for t, e, m in epochs if m != d.member and t <= d.t - TOLERANCE and e > known
        ]
        if (before is not None and before.role != "primary") or newer:
            if spans_cut(d):
                continue
            non_primary.append(
                f"n{d.member + 1} at {d.t:.3f} (poll before: "
                f"{before.role if before else None}/{before.epoch if before else None}, "
                f"after: {after.role}/{after.epoch})"
            )

    # Failover times and the duplicate bound, per fault of the primary.
    failover_s: list[float | None] = []
    dup_bound: list[int] = []
    for fault in faults:
        if not fault.failover:
            continue
        at_fault = fault.epoch or 0
        first = None
        for d in deliveries:
            if d.t < fault.t:
                continue
            after = timelines[d.member].after(d.t)
            if after is not None and after.role == "primary" and (after.epoch or 0) > at_fault:
                first = d.t - fault.t
                break
        failover_s.append(None if first is None else round(first, 3))
        if fault.primary is not None:
            late = sum(
                1 for d in deliveries if d.member == fault.primary and d.t >= fault.t - FIN_WINDOW
            )
            dup_bound.append(rdy + late)
    last_fault = max((f.injected or f.t for f in faults), default=None)
    publish_resumed = None
    if last_fault is not None:
        oks = [
            answered
            for seq, (sent, answered) in times.items()
            if status.get(seq) == "ok" and sent >= last_fault and answered is not None
        ]
        if oks:
            publish_resumed = round(min(oks) - last_fault, 3)

    final = [tl.answered[-1] if tl.answered else None for tl in timelines]
    final_epochs = {s.epoch for s in final if s is not None}
    converged = (
        all(s is not None for s in final)
        and len(final_epochs) == 1
        and sum(1 for s in final if s is not None and s.role == "primary") == 1
    )
    counts = Counter(status.values())
    return {
        "attempted": len(status),
        "acked": len(acked),
        "errors": counts.get("error", 0),
        "unknown": counts.get("unknown", 0) + counts.get("pending", 0),
        "deliveries": len(deliveries),
        "delivered": len(delivered),
        "lost": len(lost),
        "lost_examples": lost[:5],
        "lost_by_channel": {c: len(v) for c, v in lost_by_channel.items()},
        "corrupt": len(corrupt),
        "corrupt_examples": [d.body[:60].decode(errors="replace") for d in corrupt[:3]],
        "never_published": len(foreign),
        "unacked_delivered": len(unacked_delivered),
        "duplicates": duplicates,
        "dup_per_failover": dup_per_failover,
        "dup_first_epoch": dup_first_epoch,
        "dup_unattributed": dup_by_epoch.get(None, 0),
        "dup_bound": dup_bound,
        "two_primaries": two_primaries,
        "non_primary_deliveries": len(non_primary),
        "non_primary_examples": non_primary[:3],
        "epochs": [e for _, e, _ in epochs],
        "failover_s": failover_s,
        "publish_resumed_s": publish_resumed,
        "converged": converged,
        "notes": notes[:5],
    }


def check_traces(paths: list[Path]) -> dict[str, Any]:
    """The members' replication traces (trionsq's ``--replication-trace-file``) replayed
    against the spec by spec/trace_check.py: ``trace_steps``, and ``trace_violation`` (the
    first step the spec does not allow, or why the traces could not be read: must be none)."""
    from spec import trace_check

    try:
        report = trace_check.check_files(paths)
    except (OSError, trace_check.TraceError) as err:
        return {"trace_violation": f"unreadable trace: {err}"}
    figures: dict[str, Any] = {"trace_steps": report.steps}
    if report.violation is not None:
        figures["trace_violation"] = str(report.violation)
    return figures


def trial_line(fault: str, seed: int, figures: dict[str, Any]) -> str:
    """The parseable line of one trial."""
    return "FAULT-TRIAL " + json.dumps({"fault": fault, "seed": seed, **figures}, default=str)


def _fmt(values: list[float], spec: str = ".2f") -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}} / {max(values):{spec}}"


def summarise(results: list[dict[str, Any]]) -> str:
    """A table per fault kind over trials (each a `trial_line` dict, with "fault")."""
    by_fault: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_fault[r["fault"]].append(r)
    head = (
        "| fault | trials | acked | lost | corrupt delivered | never published | "
        "unacked delivered | dup/failover med/max | over bound | two primaries | "
        "non-primary deliveries | failover s med/max | >5 s | publish resumed s med/max | "
        "not converged | errors |"
    )
    rows = [head, "|" + "---|" * 16]
    totals: Counter[str] = Counter()
    for fault in sorted(by_fault):
        trials = by_fault[fault]
        dups = [float(x) for r in trials for x in r.get("dup_per_failover", [])]
        over = sum(
            1
            for r in trials
            for d, b in zip(r.get("dup_per_failover", []), r.get("dup_bound", []), strict=False)
            if d > b
        )
        fo = [x for r in trials for x in r.get("failover_s", []) if x is not None]
        fo_missing = sum(1 for r in trials for x in r.get("failover_s", []) if x is None)
        resumed = [r["publish_resumed_s"] for r in trials if r.get("publish_resumed_s") is not None]
        row = {
            "acked": sum(r.get("acked", 0) for r in trials),
            "lost": sum(r.get("lost", 0) for r in trials),
            "corrupt": sum(r.get("corrupt", 0) for r in trials),
            "never": sum(r.get("never_published", 0) for r in trials),
            "unacked": sum(r.get("unacked_delivered", 0) for r in trials),
            "two": sum(len(r.get("two_primaries", [])) for r in trials),
            "nonp": sum(r.get("non_primary_deliveries", 0) for r in trials),
            "slow": sum(1 for x in fo if x > 5) + fo_missing,
            "unconv": sum(1 for r in trials if not r.get("converged", True)),
            "err": sum(1 for r in trials if r.get("error")),
        }
        totals.update(row)
        totals["trials"] += len(trials)
        rows.append(
            f"| {fault} | {len(trials)} | {row['acked']} | {row['lost']} | {row['corrupt']} | "
            f"{row['never']} | {row['unacked']} | "
            f"{_fmt(dups, 'g')} | {over} | {row['two']} | {row['nonp']} | "
            f"{_fmt(fo)} | {row['slow']} | {_fmt(resumed)} | {row['unconv']} | {row['err']} |"
        )
    rows.append(
        f"| all | {totals['trials']} | {totals['acked']} | {totals['lost']} | "
        f"{totals['corrupt']} | {totals['never']} | {totals['unacked']} | | | {totals['two']} | "
        f"{totals['nonp']} | | {totals['slow']} | | {totals['unconv']} | {totals['err']} |"
    )
    return "\n".join(rows)
