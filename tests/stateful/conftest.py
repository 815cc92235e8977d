"""Settings for the Hypothesis stateful tests: a short run by default (CI), more examples
with ``--stateful-examples N``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

QUICK_EXAMPLES = 100
STEPS_PER_EXAMPLE = 30


@pytest.fixture
def stateful_settings(request: pytest.FixtureRequest) -> settings:
    examples = request.config.getoption("--stateful-examples") or QUICK_EXAMPLES
    return settings(
        max_examples=examples,
        stateful_step_count=STEPS_PER_EXAMPLE,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
        print_blob=True,
    )
