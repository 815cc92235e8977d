"""Running nsqlookupd as a program: signals, shutdown, and the exit code."""

from __future__ import annotations

import logging

from ..daemon import run_until_signalled
from .nsqlookupd import NSQLookupd
from .options import NSQLookupdOptions

log = logging.getLogger("trionsq.nsqlookupd")


def run(options: NSQLookupdOptions) -> int:
    """Run nsqlookupd in the foreground until SIGINT/SIGTERM; 0 after a clean shutdown, 1 (and
    one FATAL line) when it cannot start."""
    # Go's says nothing on a signal: this extra line keeps NSQ's prefix style.
    return run_until_signalled(NSQLookupd(options), log, signal_prefix="NSQLOOKUPD: ")
