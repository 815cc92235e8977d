"""Every spec and mutant that ``python -m spec check`` knows, in the order it runs them."""

from __future__ import annotations

import importlib

from .core import Mutant, Spec

# Each module has `specs()` (one Spec per configuration of bounds) and `mutants()`.
SPEC_MODULES = (
    "client_connection",
    "channel_delivery",
    "lookupd_registration",
    "disk_queue",
    "replication",
)


def _modules() -> list[object]:
    return [importlib.import_module(f"spec.{name}") for name in SPEC_MODULES]


def all_specs() -> list[Spec]:
    return [spec for module in _modules() for spec in module.specs()]  # type: ignore[attr-defined]


def all_mutants() -> list[Mutant]:
    return [m for module in _modules() for m in module.mutants()]  # type: ignore[attr-defined]


def matches(name: str, patterns: list[str]) -> bool:
    """A spec or mutant is selected by its full name or the module part of it."""
    return not patterns or any(name == p or name.startswith(p + ".") for p in patterns)
