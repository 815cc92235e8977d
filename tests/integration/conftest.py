"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.wheel import install_wheel


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a fresh venv with trionsq's wheel (built from its sdist) installed:
    `wheel.install_wheel`, once per test session."""
    return install_wheel(tmp_path_factory.mktemp("wheel"))
