"""trionsq's daemons log Go NSQ 1.3's lines for the same actions: each script of `scripts.py`
runs against trionsq's daemon and its masked lines are compared with Go's (`golden/`, recorded
by `record.py` from a Go build). Order is compared as `compare.py` explains; trionsq's own
extra lines (`EXTRAS`) are dropped first."""

from __future__ import annotations

import difflib
import re

import pytest

from .compare import canonical
from .driver import GOLDEN_DIR, Run, Step, read_golden, trionsq_family
from .scripts import CHANNELS, SCRIPTS

#: Lines trionsq logs beyond Go's for the scripts' actions, in NSQ's prefix style.
EXTRAS: dict[str, list[str]] = {
    # Go's daemons exit on a signal without a word; trionsq says which signal started it.
    "nsqd": [r"INFO: NSQ: received SIGTERM, shutting down$"],
    "nsqlookupd": [r"INFO: NSQLOOKUPD: received SIGTERM, shutting down$"],
    "nsqadmin": [
        r"INFO: NSQADMIN: received SIGTERM, shutting down$",
        # /api/nodes also pings each node to mark those that do not answer (an extension).
        r"INFO: CI: querying nsqd http://\S+/ping$",
    ],
}


#: Go's lines trionsq does not log for the same actions: (step, pattern), why beside each.
GO_ONLY: dict[str, list[tuple[str, str]]] = {
    "nsqd": [
        # go-diskqueue's ioLoop reads ahead the message after the last one read whenever one
        # is there: the messages a channel saves at shutdown are read back at once (into a
        # buffer nobody takes from). trionsq reads a segment when a consumer needs it.
        ("SIGTERM", r"INFO: DISKQUEUE\([^)]*\): readOne\(\) opened "),
    ],
}


@pytest.mark.parametrize("daemon", sorted(SCRIPTS))
def test_log_lines_match_go(daemon: str) -> None:
    golden = read_golden(GOLDEN_DIR / f"{daemon}.txt")
    run = Run(trionsq_family(), expected=golden)
    run.extras = [re.compile(p) for p in EXTRAS[daemon]]
    try:
        SCRIPTS[daemon](run)
    finally:
        run.close()
    for step in golden:
        for name, pattern in GO_ONLY.get(daemon, []):
            if step.name == name:
                step.lines = [line for line in step.lines if not re.search(pattern, line)]
    ours = [
        Step(s.name, s.mode, [line for line in s.lines if not run.is_extra(line)])
        for s in run.steps
    ]
    want, got = canonical(golden, CHANNELS), canonical(ours, CHANNELS)
    if got != want:
        diff = difflib.unified_diff(
            want.splitlines(), got.splitlines(), "go", "trionsq", n=2, lineterm=""
        )
        pytest.fail(f"{daemon}'s lines differ from Go's:\n" + "\n".join(diff), pytrace=False)
