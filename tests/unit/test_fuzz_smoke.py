"""The fuzz targets (fuzz/targets) without atheris' engine: each over its seeds and a couple of
thousand mutated inputs, and every input saved for a fixed finding (fuzz/regressions/<target>/)
replayed through its target."""

from __future__ import annotations

import pytest

from fuzz import harness
from fuzz.targets import TARGETS


@pytest.mark.parametrize("name", list(TARGETS))
def test_target_smoke(name: str) -> None:
    result = harness.smoke(name, count=2000, budget=1.5)
    assert result.executions >= len(harness.load(name).seeds())
    assert not result.failures, result.failures[0][1]


@pytest.mark.parametrize("name", list(TARGETS))
def test_regressions_stay_fixed(name: str) -> None:
    failures = harness.replay([name], crashes=False)
    assert not failures, failures[0][1]


def test_every_target_says_what_must_hold() -> None:
    for name in TARGETS:
        assert "must hold" in (harness.load(name).__doc__ or ""), name
