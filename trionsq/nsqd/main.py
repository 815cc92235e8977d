"""Running nsqd as a program: signals, the ordered shutdown, and the exit code."""

from __future__ import annotations

import logging

from ..daemon import run_until_signalled
from .nsqd import NSQD
from .options import NSQDOptions

log = logging.getLogger("trionsq.nsqd")


def run(options: NSQDOptions) -> int:
    """Run nsqd in the foreground until SIGINT/SIGTERM; 0 after a clean shutdown."""
    return run_until_signalled(NSQD(options), log, signal_prefix="NSQ: ")
