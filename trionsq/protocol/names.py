"""Topic and channel name rules (reference §1.10)."""

from __future__ import annotations

import re

EPHEMERAL_SUFFIX = "#ephemeral"
_VALID_NAME = re.compile(r"^[.a-zA-Z0-9_-]+(#ephemeral)?$")


def is_valid_name(name: str) -> bool:
    """True when `name` is a valid topic or channel name: 1..64 chars, optional #ephemeral."""
    return 0 < len(name) <= 64 and _VALID_NAME.match(name) is not None


is_valid_topic_name = is_valid_name
is_valid_channel_name = is_valid_name


def is_ephemeral(name: str) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)
