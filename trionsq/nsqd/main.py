"""Running nsqd as a program: signals, the ordered shutdown, and the exit code."""

from __future__ import annotations

import logging

from ..daemon import run_until_signalled
from .nsqd import NSQD
from .options import NSQDOptions

log = logging.getLogger("trionsq.nsqd")


def run(options: NSQDOptions) -> int:
    """Run nsqd in the foreground until SIGINT/SIGTERM; 0 after a clean shutdown, 1 (with one
    FATAL line) if it could not start, or if its shutdown failed to keep what it had accepted
    (messages the disk refused, a failed final fsync or nsqd.dat write)."""
    nsqd = NSQD(options)
    code = run_until_signalled(nsqd, log, signal_prefix="NSQ: ")
    if code == 0 and nsqd.exit_errors:
        log.critical("NSQ: exit incomplete - %s", "; ".join(nsqd.exit_errors))
        return 1
    return code
