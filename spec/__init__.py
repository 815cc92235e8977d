"""Executable specifications of trionsq's protocol state machines, and the model checker
that explores them (``python -m spec check``). See spec/README.md."""

from .checker import Result, Violation, check, format_trace
from .core import Action, Invariant, Liveness, Mutant, Spec, StepInvariant

__all__ = [
    "Action",
    "Invariant",
    "Liveness",
    "Mutant",
    "Result",
    "Spec",
    "StepInvariant",
    "Violation",
    "check",
    "format_trace",
]
