"""The atheris targets, one module each. A target module has a docstring saying what must hold,
``test_one_input(data: bytes)`` (raises on a violation; returns normally otherwise) and
``seeds() -> list[bytes]`` (inputs made with trionsq's own encoders)."""

from __future__ import annotations

import importlib
from types import ModuleType

#: Target name -> module (in fuzz.targets).
TARGETS: dict[str, str] = {
    "parser_v2": "fuzz.targets.parser_v2",
    "message": "fuzz.targets.message",
    "lookup_v1": "fuzz.targets.lookup_v1",
    "identify": "fuzz.targets.identify",
    "http_mpub": "fuzz.targets.http_mpub",
    "diskqueue": "fuzz.targets.diskqueue",
    "options": "fuzz.targets.options",
    "snappy": "fuzz.targets.snappy",
    "deflate": "fuzz.targets.deflate",
}


def load(name: str) -> ModuleType:
    """The target module called `name`."""
    return importlib.import_module(TARGETS[name])


def summary(name: str) -> str:
    """The first line of a target's docstring."""
    doc = load(name).__doc__ or ""
    return " ".join(doc.strip().split("\n\n")[0].split())
