"""Running nsqlookupd as a program: signals, shutdown, and the exit code."""

from __future__ import annotations

import logging
import signal

import trio

from .nsqlookupd import NSQLookupd, StartupError, first_leaf
from .options import NSQLookupdOptions

log = logging.getLogger("trionsq.nsqlookupd")


def run(options: NSQLookupdOptions) -> int:
    """Run nsqlookupd in the foreground until SIGINT/SIGTERM; 0 after a clean shutdown, 1 (and
    one FATAL line) when it cannot start."""
    try:
        return trio.run(_main, options)
    except StartupError as err:
        log.critical("%s", err)
        return 1
    except BaseExceptionGroup as group:
        startup, _ = group.split(StartupError)
        if startup is None:
            raise
        log.critical("%s", first_leaf(startup))
        return 1


async def _main(options: NSQLookupdOptions) -> int:
    lookupd = NSQLookupd(options)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def exit_on_signal() -> None:
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    lookupd.request_exit()

            nursery.start_soon(exit_on_signal, name="signals")
            await lookupd.run()
            nursery.cancel_scope.cancel()
    return 0
