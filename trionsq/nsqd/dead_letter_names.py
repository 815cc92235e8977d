"""The --dead-letter-topic pattern: its validation, the dead-letter topic it names for a
channel, and which topics are dead-letter topics (dead_letter.py applies them)."""

from __future__ import annotations

import re

from ..protocol.names import EPHEMERAL_SUFFIX, is_ephemeral, is_valid_topic_name

#: --dead-letter-topic's default.
DEFAULT_DEAD_LETTER_TOPIC = "{topic}.dead"
#: The attempts field is 16 bits.
MAX_ATTEMPTS_LIMIT = 0xFFFF

_PLACEHOLDER = re.compile(r"(\{topic\}|\{channel\})")
_NAME_CHARS = re.compile(r"[.a-zA-Z0-9_-]+")


def render(pattern: str, topic: str, channel: str) -> str:
    """The pattern with its placeholders replaced (names without ``#ephemeral``)."""
    return pattern.replace("{topic}", topic).replace("{channel}", channel)


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot name dead-letter topics (an --dead-letter-topic error), or None."""
    literal = _PLACEHOLDER.sub("", pattern)
    if not pattern:
        return "must not be empty"
    if "{" in literal or "}" in literal:
        return "may use only the placeholders {topic} and {channel}"
    if literal and not _NAME_CHARS.fullmatch(literal):
        return "must be made of the characters [.a-zA-Z0-9_-] besides {topic} and {channel}"
    if not literal:
        # Else every topic would look like a dead-letter topic (and be one's own).
        return "must have text besides {topic} and {channel}"
    if not is_valid_topic_name(render(pattern, "t", "c")):
        return "makes names longer than 64 characters"
    return None


class DeadLetterNames:
    """--dead-letter-topic, compiled: the dead-letter topic of a channel, and which topics are
    dead-letter topics."""

    __slots__ = ("_matcher", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        pieces = _PLACEHOLDER.split(pattern)
        regex = "".join(
            r"[.a-zA-Z0-9_-]+" if piece in ("{topic}", "{channel}") else re.escape(piece)
            for piece in pieces
        )
        self._matcher = re.compile(regex + "(#ephemeral)?")

    def topic_for(self, topic: str, channel: str) -> str | None:
        """The dead-letter topic of channel `channel` of `topic` (ephemeral if `topic` is), or
        None when the pattern makes an invalid name of them (over 64 characters)."""
        base_topic = topic.removesuffix(EPHEMERAL_SUFFIX)
        name = render(self.pattern, base_topic, channel.removesuffix(EPHEMERAL_SUFFIX))
        if is_ephemeral(topic):
            name += EPHEMERAL_SUFFIX
        return name if is_valid_topic_name(name) else None

    def is_dead_letter_topic(self, name: str) -> bool:
        return self._matcher.fullmatch(name) is not None
