"""Topic and channel name rules (docs/protocol.md §1.10)."""

from __future__ import annotations

import re

EPHEMERAL_SUFFIX = "#ephemeral"
# fullmatch, not ``$``: Python's ``$`` also matches before a trailing newline, Go's does not.
_VALID_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


def is_valid_name(name: str) -> bool:
    """True when `name` is a valid topic or channel name: 1..64 chars, optional #ephemeral."""
    return 0 < len(name) <= 64 and _VALID_NAME.fullmatch(name) is not None


is_valid_topic_name = is_valid_name
is_valid_channel_name = is_valid_name


def is_ephemeral(name: str) -> bool:
    """True when `name` ends with ``#ephemeral`` (docs/protocol.md §2.6)."""
    return name.endswith(EPHEMERAL_SUFFIX)
