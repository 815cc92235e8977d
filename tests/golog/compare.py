"""How a step's lines are compared with Go's.

Go nsqd logs from many goroutines at once (the connection's IOLoop and its messagePump, the
lookup loop, the goroutine that persists metadata, each topic's and diskqueue's loops, HTTP
handlers), so within one step only the lines of one goroutine come in a fixed order. A step is
therefore compared as a set of groups, each a sequence in Go's order:

- a line naming one of the script's connections (``<A>``, ``<http>``, ...) belongs to that
  connection (its messagePump's lines, logged by their own goroutine, form a group of their own);
- ``TOPIC(t)``, ``CHANNEL(c)`` and ``DISKQUEUE(t[:c])`` lines to topic t's group (a topic's
  close or delete runs its channels' and disk queues' closing in order; Go closes the topics
  themselves in its map's random order);
- ``LOOKUP``/``LOOKUPD`` lines to the lookup loop's group;
- anything else to the group of its first word (``NSQ``, ``TCP``, ``HTTP``, ``CI``, ``DB``, ...).

Steps marked ``multiset`` compare their lines in any order (where even one group's order is
not fixed: lookupd removing a client's registrations walks a Go map).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .driver import Step

_MESSAGE = re.compile(r"^\S+ <time> [A-Z]+: (.*)$")
_CONN = re.compile(r"<([A-Z]\w*|http\w*)>")
_ENTITY = re.compile(r"^(TOPIC|CHANNEL|DISKQUEUE)\(([^):]+)")
_WORD = re.compile(r"^[A-Za-z_]+")


def group_key(line: str, channels: Mapping[str, str]) -> str:
    m = _MESSAGE.match(line)
    message = m.group(1) if m else line
    conn = _CONN.search(message)
    if conn:
        pump = " messagePump" if "messagePump" in message else ""
        return f"conn {conn.group(1)}{pump}"
    entity = _ENTITY.match(message)
    if entity:
        name = entity.group(2)
        topic = channels.get(name, name) if entity.group(1) == "CHANNEL" else name
        return f"topic {topic}"
    if message.startswith("LOOKUP"):
        return "lookup"
    word = _WORD.match(message)
    return word.group(0) if word else message


def canonical(steps: Sequence[Step], channels: Mapping[str, str]) -> str:
    """The steps as text in which only the compared order remains: per step, its groups sorted
    by key (each in its own order), or its lines sorted in a multiset step."""
    out: list[str] = []
    for step in steps:
        out.append(f"== {step.name} [{step.mode}]")
        if step.mode == "multiset":
            out.extend(sorted(step.lines))
            continue
        groups: dict[str, list[str]] = {}
        for line in step.lines:
            groups.setdefault(group_key(line, channels), []).append(line)
        for key in sorted(groups):
            out.append(f"  -- {key}")
            out.extend(groups[key])
    return "\n".join(out) + "\n"
