"""Topic and channel names (docs/protocol.md §1.10): ``^[.a-zA-Z0-9_-]+(#ephemeral)?$``, 1..64."""

from __future__ import annotations

import pytest

from trionsq.protocol import (
    is_ephemeral,
    is_valid_channel_name,
    is_valid_name,
    is_valid_topic_name,
)


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "topic",
        "Topic.Name-1_2",
        ".",
        "-",
        "_",
        "..",
        "a#ephemeral",
        "x" * 64,
        "x" * 54 + "#ephemeral",  # 64 with the suffix
    ],
)
def test_valid(name: str) -> None:
    assert is_valid_name(name)
    assert is_valid_topic_name(name)
    assert is_valid_channel_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 65,
        "x" * 55 + "#ephemeral",  # 65 with the suffix
        "#ephemeral",  # nothing before the suffix
        "a#ephemeral#ephemeral",
        "a#Ephemeral",
        "a#",
        "a#eph",
        "with space",
        "slash/",
        "colon:",
        "star*",
        "tab\t",
        "topic\n",  # Python's $ would match before a trailing newline; Go's does not
        "\ntopic",
        "caf\u00e9",
        "\u0661",  # a non-ASCII digit
    ],
)
def test_invalid(name: str) -> None:
    assert not is_valid_name(name)
    assert not is_valid_topic_name(name)
    assert not is_valid_channel_name(name)


def test_is_ephemeral() -> None:
    assert is_ephemeral("t#ephemeral")
    assert is_ephemeral("#ephemeral")
    assert not is_ephemeral("t")
    assert not is_ephemeral("t#ephemeral1")
    assert not is_ephemeral("ephemeral")
