"""The version line every trionsq program prints for ``--version``, in Go NSQ's format."""

from __future__ import annotations

import platform

from . import NSQ_VERSION, __version__

__all__ = ["version_string"]


def version_string(app: str) -> str:
    """Go's ``version.String(app)`` with trionsq in place of the Go toolchain."""
    python = platform.python_version()
    return f"{app} v{NSQ_VERSION} (built w/trionsq {__version__}, python {python})"
