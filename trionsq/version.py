"""The version line every trionsq program prints for ``--version``, in Go NSQ's format.

Go prints ``nsqd v1.3.0 (built w/go1.19.8)``, and the test harnesses of NSQ client libraries
parse it as ``NAME vX.Y.Z (built w/TOKEN)`` with TOKEN matching ``[a-z0-9.-]+``: the token must
stay one word of those characters. The start-up log line is the same string, as Go's is.
Go's bundled apps (nsq_tail, ...) print the shorter ``nsq_tail v1.3.0``, and so do trionsq's.
"""

from __future__ import annotations

from . import NSQ_VERSION, __version__

__all__ = ["app_version_string", "build_description", "version_string"]

#: The one token after ``built w/``: ``trionsq-0.1.0``.
BUILT_WITH = f"trionsq-{__version__}"


def version_string(app: str) -> str:
    """Go's ``version.String(app)`` with trionsq in place of the Go toolchain."""
    return f"{app} v{NSQ_VERSION} (built w/{BUILT_WITH})"


def app_version_string(app: str) -> str:
    """What Go's bundled apps print (``nsq_tail v1.3.0``): no build token."""
    return f"{app} v{NSQ_VERSION}"


def build_description(app: str) -> str:
    """The start-up log line: Go logs ``version.String(app)``, the `version_string`."""
    return version_string(app)
