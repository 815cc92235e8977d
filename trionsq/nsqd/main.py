"""Running nsqd as a program: signals, the ordered shutdown, and the exit code."""

from __future__ import annotations

import logging
import signal

import trio

from .nsqd import NSQD, StartupError
from .options import NSQDOptions

log = logging.getLogger("trionsq.nsqd")


def run(options: NSQDOptions) -> int:
    """Run nsqd in the foreground until SIGINT/SIGTERM; 0 after a clean shutdown."""
    try:
        return trio.run(_main, options)
    except StartupError as err:
        log.critical("%s", err)
        return 1
    except BaseExceptionGroup as group:
        startup, _ = group.split(StartupError)
        if startup is None:
            raise
        log.critical("%s", _first_leaf(startup))
        return 1


def _first_leaf(group: BaseExceptionGroup[StartupError]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def _main(options: NSQDOptions) -> int:
    nsqd = NSQD(options)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def exit_on_signal() -> None:
                async for signum in signals:
                    log.info("NSQ: received %s, shutting down", signal.Signals(signum).name)
                    nsqd.request_exit()

            nursery.start_soon(exit_on_signal, name="signals")
            await nsqd.run()
            nursery.cancel_scope.cancel()
    return 0
