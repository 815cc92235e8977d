"""`python -m spec`: what it prints and its exit status."""

from __future__ import annotations

import subprocess
import sys

import pytest

import spec.__main__ as cli
from spec import Action, Invariant, Mutant, Spec
from spec.registry import SPEC_MODULES, all_mutants, all_specs


def counter(limit: int) -> Spec:
    def inc(x: int):  # type: ignore[no-untyped-def]
        if x < 5:
            yield "Inc", x + 1

    return Spec(
        "toy.counter",
        "a counter",
        lambda: [0],
        (Action("Inc", inc),),
        invariants=(Invariant("below the limit", lambda x: x < limit),),
        bounds={"steps": 5},
    )


def test_check_prints_bounds_states_depth_time_and_result(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "all_specs", lambda: [counter(10)])
    monkeypatch.setattr(cli, "all_mutants", lambda: [Mutant("toy.tight", "too tight", counter(3))])
    assert cli.main(["check", "toy"]) == 0
    out = capsys.readouterr().out
    assert "toy.counter: ok" in out
    assert "bounds: steps=5" in out
    assert "6 distinct states, depth 5" in out
    assert "mutant toy.tight: rejected by invariant 'below the limit' (3-step counterexample" in out


def test_a_mutant_that_is_not_rejected_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "all_specs", lambda: [counter(10)])
    monkeypatch.setattr(cli, "all_mutants", lambda: [Mutant("toy.same", "no fault", counter(10))])
    assert cli.main(["check"]) == 1
    assert "mutant toy.same: NOT REJECTED" in capsys.readouterr().out


def test_a_violated_spec_fails_the_run_and_prints_the_trace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "all_specs", lambda: [counter(2)])
    monkeypatch.setattr(cli, "all_mutants", list)
    assert cli.main(["check"]) == 1
    out = capsys.readouterr().out
    assert "toy.counter: VIOLATION" in out
    assert "    2. Inc" in out


def test_an_unknown_name_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "no_such_spec"]) == 2
    assert "no spec matches no_such_spec" in capsys.readouterr().err


def test_every_module_has_specs_and_mutants_named_after_it() -> None:
    for module in SPEC_MODULES:
        assert any(s.name.split(".")[0] == module for s in all_specs())
        assert sum(m.name.split(".")[0] == module for m in all_mutants()) >= 4


def test_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spec", "check", "client_connection", "--no-mutants"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "client_connection: ok" in done.stdout and "distinct states" in done.stdout
