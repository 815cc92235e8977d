"""Running nsqd as a program: its data path and sockets opened first, signals, the ordered
shutdown, and the exit code."""

from __future__ import annotations

import logging
import os

from ..daemon import StartupError, run_until_signalled
from ..diskqueue.fs import LOCAL
from .opening import open_nsqd
from .options import NSQDOptions

log = logging.getLogger("trionsq.nsqd")


def run(options: NSQDOptions) -> int:
    """Run nsqd in the foreground until SIGINT/SIGTERM; 0 after a clean shutdown, 1 (with one
    FATAL line) if it could not start, or if its shutdown failed to keep what it had accepted
    (messages the disk refused, a failed final fsync or nsqd.dat write)."""
    try:
        opened = open_nsqd(options, LOCAL, options.data_path or os.getcwd())
    except StartupError as err:
        log.critical("%s", err)
        return 1
    # The daemon's modules (trio, hypercorn, quart: most of start-up's time) are imported
    # only now: meanwhile the kernel queues the connections of clients that do not wait.
    from .assembly import new_nsqd

    nsqd = new_nsqd(options, opened=opened)
    code = run_until_signalled(nsqd, log, signal_prefix="NSQ: ")
    if code == 0 and nsqd.exit_errors:
        log.critical("NSQ: exit incomplete - %s", "; ".join(nsqd.exit_errors))
        return 1
    return code
