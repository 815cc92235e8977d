"""The trace checker (spec/trace_check.py) on small hand-written traces of a set of three: a
run the spec allows passes, and each rule is broken once, named at the step that breaks it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spec import trace_check as tc
from spec.__main__ import main as spec_main

T = "rt"
E1 = 1 * 1024 + 1  # node 1's first ballot
E2 = 2 * 1024 + 2  # node 2's ballot after it


class Run:
    """Traces of one run: `step(node, ev, ...)` appends a line to node's trace, with a clock
    shared by all (one host)."""

    def __init__(self) -> None:
        self.lines: dict[int, list[dict[str, Any]]] = {}
        self.clock = 100.0

    def step(self, node: int, ev: str, role: str | None = None, epoch: int = 0, **f: Any) -> int:
        lines = self.lines.setdefault(node, [])
        self.clock += 0.01
        line: dict[str, Any] = {
            "node": node,
            "seq": len(lines),
            "wall": 1e9 + self.clock,
            "mono": self.clock,
            "ev": ev,
        }
        if role is not None:
            line.update(topic=T, role=role, epoch=epoch)
        line.update(f)
        lines.append(line)
        return line["seq"]

    def start(self, *nodes: int, epoch: int = 0) -> None:
        for node in nodes:
            self.step(node, "start", format=1, boot="b", members=3, degraded="refuse", pid=1)
            self.step(node, "load", "replica", epoch)

    def elect(self, candidate: int = 1, voters: tuple[int, ...] = (2,), epoch: int = E1) -> None:
        """`candidate` stands in `epoch`, `voters` promise it, it takes office."""
        self.step(candidate, "stand", "candidate", epoch, force=False)
        for voter in voters:
            held = self.epoch_of(voter)
            self.step(voter, "promise", "replica", held, to=candidate, promised=epoch)
            self.step(voter, "step_down", "replica", epoch, was="replica", why="promised")
            self.step(candidate, "merge", "candidate", epoch, sender=voter, fetched=0)
        self.step(candidate, "take_office", "primary", epoch, doubled=False, pos=0)

    def epoch_of(self, node: int) -> int:
        for line in reversed(self.lines.get(node, [])):
            if "epoch" in line:
                return int(line["epoch"])
        return 0

    def join(self, primary: int, member: int, epoch: int, pos: int) -> None:
        if self.epoch_of(member) != epoch:
            self.step(member, "step_down", "replica", epoch, was="replica", why="sync")
        self.step(primary, "merge", "primary", epoch, sender=member, fetched=0)
        self.step(primary, "join", "primary", epoch, member=member, pos=pos)

    def publish(self, primary: int, epoch: int, total: int, members: tuple[int, ...]) -> None:
        """The primary writes up to `total`, the members write and acknowledge, then OK."""
        self.step(primary, "wrote", "primary", epoch, sender=primary, total=total)
        for member in members:
            self.step(member, "wrote", "replica", epoch, sender=primary, of=epoch, total=total)
        acked = {str(m): total for m in members}
        self.step(primary, "ack", "primary", epoch, pos=total, members=acked)

    def write(self, root: Path) -> list[Path]:
        paths = []
        for node, lines in sorted(self.lines.items()):
            path = root / f"n{node}.trace"
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
            paths.append(path)
        return paths

    def check(self, root: Path) -> tc.Report:
        return tc.check_files(self.write(root))


def healthy() -> Run:
    """Node 1 elected, two members, publishes and FINs; node 1 killed, node 2 elected with
    node 3, node 1 back as a replica of it."""
    run = Run()
    run.start(1, 2, 3)
    run.elect(1, (2,))
    run.join(1, 2, E1, 0)
    run.join(1, 3, E1, 0)
    run.publish(1, E1, 3, (2, 3))
    run.step(1, "fins_sent", "primary", E1, count=2, to=[2, 3])
    run.step(2, "fins", "replica", E1, sender=1, of=E1, count=2)
    run.publish(1, E1, 5, (2,))
    # kill -9 of node 1 (no stop); node 2 stands, node 3 promises
    run.elect(2, (3,), E2)
    run.join(2, 3, E2, 5)
    run.publish(2, E2, 8, (3,))
    run.start(1, epoch=E1)
    run.join(2, 1, E2, 8)
    run.publish(2, E2, 9, (1, 3))
    # node 2's lease runs out: a replica of its own epoch
    run.step(2, "step_down", "replica", E2, was="primary", why="lease expired")
    return run


def violated(run: Run, root: Path) -> tc.Violation:
    report = run.check(root)
    assert report.violation is not None, report.summary()
    return report.violation


def test_a_run_the_spec_allows_passes(tmp_path: Path) -> None:
    report = healthy().check(tmp_path)
    assert report.ok, report.summary()
    assert report.nodes == [1, 2, 3] and report.topics == [T]
    assert report.counts["take_office"] == 2 and report.counts["ack"] == 4


def test_a_defeated_candidate_stands_again(tmp_path: Path) -> None:
    run = Run()
    run.start(1, 2, 3)
    run.step(1, "stand", "candidate", E1, force=False)
    run.step(1, "merge", "replica", E1, sender=3, fetched=0)  # defeated: a replica again
    run.elect(1, (2,), 2 * 1024 + 1)
    assert run.check(tmp_path).ok


def _case(tmp_path: Path, build: Callable[[Run], None]) -> tc.Violation:
    run = Run()
    run.start(1, 2, 3)
    build(run)
    return violated(run, tmp_path)


def test_two_primaries_in_one_epoch(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.step(3, "take_office", "primary", E1, doubled=False, pos=0)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.node, v.step.ev) == (tc.ONE_PRIMARY, 3, "take_office")
    assert "not its ballot" in v.detail


def test_taking_office_twice(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.step(1, "take_office", "primary", E1, doubled=False, pos=0)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.node) == (tc.ONE_PRIMARY, 1) and "held already by it" in v.detail


def test_taking_office_without_a_quorum(tmp_path: Path) -> None:
    v = _case(tmp_path, lambda run: run.elect(1, ()))
    assert (v.rule, v.step.ev) == (tc.ELECTED, "take_office")
    assert "1 vote(s)" in v.detail


def test_merging_a_state_that_was_not_promised(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.step(1, "stand", "candidate", E1, force=False)
        run.step(1, "merge", "candidate", E1, sender=3, fetched=0)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.node, v.step.seq) == (tc.PROMISER, 1, 3)


def test_standing_in_a_ballot_not_its_next(tmp_path: Path) -> None:
    v = _case(tmp_path, lambda run: run.step(1, "stand", "candidate", 3 * 1024 + 1))
    assert (v.rule, v.step.ev) == (tc.STAND, "stand") and "next ballot is 1.1" in v.detail


def test_promising_an_epoch_not_above_its_own(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(2, (3,), 1 * 1024 + 2)
        run.step(3, "promise", "replica", 1 * 1024 + 2, to=1, promised=E1)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.node) == (tc.PROMISE, 3) and "not above" in v.detail


def test_a_promise_forgotten_in_a_crash(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.start(2, epoch=0)  # nsqd.dat lost the promise

    v = _case(tmp_path, build)
    assert (v.rule, v.step.node, v.step.ev) == (tc.KEPT, 2, "load")


def test_a_wiped_member_starts_afresh(tmp_path: Path) -> None:
    run = Run()
    run.start(1, 2, 3)
    run.elect(1, (2,))
    run.step(2, "start", format=1, boot="b", members=3, degraded="refuse", pid=2)
    run.step(2, "load", "replica", 0, saved=False)  # its data directory was wiped
    assert run.check(tmp_path).ok


def test_adopting_an_epoch_nobody_stood_in(tmp_path: Path) -> None:
    v = _case(tmp_path, lambda run: run.step(2, "step_down", "replica", E2, was="replica"))
    assert (v.rule, v.step.node) == (tc.ADOPT, 2)


def test_a_replica_writing_an_old_primarys_stream(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.join(1, 3, E1, 0)
        run.elect(2, (3,), E2)
        run.step(3, "wrote", "replica", E2, sender=1, of=E1, total=4)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.node, v.step.ev) == (tc.STREAM, 3, "wrote")
    assert "of epoch 1.1 as a replica of epoch 2.2" in v.detail


def test_a_replica_writing_a_stream_of_a_node_that_never_took_office(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.step(3, "step_down", "replica", E1, was="replica")
        run.step(3, "fins", "replica", E1, sender=2, of=E1, count=1)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.ev) == (tc.STREAM, "fins") and "node 2 never took" in v.detail


def test_a_replica_sending_fins(tmp_path: Path) -> None:
    v = _case(tmp_path, lambda run: run.step(2, "fins_sent", "replica", 0, count=1, to=[1]))
    assert (v.rule, v.step.node) == (tc.PRIMARY_ONLY, 2)


def test_stream_positions_going_back(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.step(1, "wrote", "primary", E1, sender=1, total=5)
        run.step(1, "wrote", "primary", E1, sender=1, total=3)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.seq) == (tc.POSITIONS, 6)


def test_a_member_joining_an_epoch_it_never_adopted(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.step(1, "join", "primary", E1, member=3, pos=0)

    v = _case(tmp_path, build)
    assert (v.rule, v.step.ev) == (tc.JOIN, "join")


def test_acknowledged_before_a_quorum_wrote_it(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.join(1, 2, E1, 0)
        run.step(1, "wrote", "primary", E1, sender=1, total=2)
        run.step(2, "wrote", "replica", E1, sender=1, of=E1, total=1)
        run.step(1, "ack", "primary", E1, pos=2, members={"2": 1})

    v = _case(tmp_path, build)
    assert (v.rule, v.step.node, v.step.ev) == (tc.ACK_QUORUM, 1, "ack")
    assert "with 1 copy of the 2" in v.detail


def test_acknowledged_before_the_primary_wrote_it(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.join(1, 2, E1, 0)
        run.step(1, "ack", "primary", E1, pos=1, members={"2": 1})

    v = _case(tmp_path, build)
    assert v.rule == tc.ACK_QUORUM and "the primary wrote up to 0" in v.detail


def test_a_member_counted_for_what_it_did_not_write(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.join(1, 2, E1, 0)
        run.step(1, "wrote", "primary", E1, sender=1, total=2)
        run.step(2, "wrote", "replica", E1, sender=1, of=E1, total=1)
        run.clock += tc.RESTART_SLACK  # long after node 2 started: its trace is whole
        run.step(1, "ack", "primary", E1, pos=2, members={"2": 2})
        run.step(2, "fins", "replica", E1, sender=1, of=E1, count=1)  # its trace goes on

    v = _case(tmp_path, build)
    assert (v.rule, v.step.ev) == (tc.ACK_BACKED, "ack") and "up to 1" in v.detail


def test_a_member_whose_trace_lost_its_tail_is_not_blamed(tmp_path: Path) -> None:
    def build(run: Run) -> None:
        run.elect(1, (2,))
        run.join(1, 2, E1, 0)
        run.step(1, "wrote", "primary", E1, sender=1, total=2)
        run.step(1, "ack", "primary", E1, pos=2, members={"2": 2})  # node 2's write: lost

    run = Run()
    run.start(1, 2, 3)
    build(run)
    assert run.check(tmp_path).ok


def test_a_role_change_that_no_step_accounts_for(tmp_path: Path) -> None:
    v = _case(tmp_path, lambda run: run.step(2, "merge", "primary", 0, sender=3, fetched=0))
    assert (v.rule, v.step.node) == (tc.UNTRACED, 2)


def test_torn_lines_of_a_killed_process_are_accepted(tmp_path: Path) -> None:
    paths = healthy().write(tmp_path)
    lines = paths[0].read_text().splitlines(keepends=True)
    restart = next(i for i, line in enumerate(lines) if i and '"start"' in line)
    lines[restart - 1] = lines[restart - 1][:25] + "\n"  # cut short before the restart
    paths[0].write_text("".join(lines) + lines[-1][:30])  # and a torn last line
    report = tc.check_files(paths)
    assert report.ok, report.summary()
    assert len([n for n in report.notes if "cut short" in n]) == 2


def test_a_malformed_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    paths = healthy().write(tmp_path)
    lines = paths[1].read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    paths[1].write_text("".join(lines))
    with pytest.raises(tc.TraceError, match=r"n2\.trace:3"):
        tc.check_files(paths)


def test_two_traces_of_one_node_are_an_error(tmp_path: Path) -> None:
    paths = healthy().write(tmp_path)
    copy = tmp_path / "copy.trace"
    copy.write_text(paths[0].read_text())
    with pytest.raises(tc.TraceError, match="two steps numbered"):
        tc.check_files([*paths, copy])


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good_dir = tmp_path / "good"
    good_dir.mkdir()
    good = healthy().write(good_dir)
    assert spec_main(["trace", *map(str, good)]) == 0
    assert capsys.readouterr().out.startswith("trace: ")
    bad = tmp_path / "bad"
    bad.mkdir()
    run = Run()
    run.start(1, 2, 3)
    run.elect(1, ())
    assert spec_main(["trace", *map(str, run.write(bad))]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION at node 1 seq 3" in out and tc.ELECTED in out
    assert spec_main(["trace", str(tmp_path / "missing.trace")]) == 2
