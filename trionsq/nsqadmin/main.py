"""Running nsqadmin as a program: signals, shutdown, and the exit code."""

from __future__ import annotations

import logging

from ..daemon import run_until_signalled
from .nsqadmin import NSQAdmin
from .options import NSQAdminOptions

log = logging.getLogger("trionsq.nsqadmin")


def run(options: NSQAdminOptions) -> int:
    """Run nsqadmin in the foreground until SIGINT/SIGTERM; 0 after a clean shutdown, 1 (and
    one FATAL line) when it cannot start."""
    # Go's says nothing on a signal: this extra line keeps NSQ's prefix style.
    return run_until_signalled(NSQAdmin(options), log, signal_prefix="NSQADMIN: ")
