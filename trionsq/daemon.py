"""What every trionsq daemon shares as a program: `StartupError` (with Go's texts for a failed
listen and unusable TLS files), starting its HTTP server (`start_http`), running in the
foreground until SIGINT/SIGTERM (`run_until_signalled`), and the exit codes of Go's daemons (0
after a clean shutdown, 1 with one FATAL line when it cannot start)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from .goerrors import cert_pool_error, key_pair_error, listen_error
from .net.addresses import split_host_port

if TYPE_CHECKING:
    import trio


class StartupError(Exception):
    """The daemon cannot start (bad configuration, address in use, data path locked)."""


class Daemon(Protocol):
    async def run(self) -> None: ...

    def request_exit(self) -> None: ...


def first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception of a (nested) exception group."""
    first = group.exceptions[0]
    return first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def listen_failed(
    address: str, err: BaseException, daemon: str, network: str = "tcp"
) -> StartupError:
    """Go's ``failed to instantiate <daemon> - listen (<address>) failed - listen tcp <address>:
    bind: address already in use`` (the reason in Go's words: `goerrors.listen_error`)."""
    reason = listen_error(address, err, network)
    return StartupError(f"failed to instantiate {daemon} - listen ({address}) failed - {reason}")


def server_tls_error(cert: str, key: str, ca_file: str, err: BaseException) -> str:
    """Why Go's buildTLSConfig fails on these files, in its words (``open PATH: no such file or
    directory``, ``tls: failed to find any PEM data in certificate input``, ``failed to append
    certificate to pool``); `err`'s text when Go's checks find nothing wrong."""
    problem = key_pair_error(cert, key)
    if problem is None and ca_file:
        problem = cert_pool_error(ca_file)
    return problem or str(err)


async def start_http(
    nursery: trio.Nursery,
    serve: Callable[..., Awaitable[None]],
    address: str,
    daemon: str = "nsqd",
    *,
    fd: int | None = None,
) -> tuple[str, int]:
    """Start ``serve(bind, task_status=...)`` (a daemon's ``serve_http``, started with its bound
    URLs) in `nursery` on Go's listen address `address` (empty: any host, any port), or on the
    listening socket `fd` opened for it; the bound host and port. A bad address or a failed
    bind is Go's ``failed to instantiate <daemon> - listen (...) failed - ...``
    `StartupError`."""
    try:
        if fd is not None:
            bind = f"fd://{fd}"
        else:
            host, port = split_host_port(address or ":0")
            bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        urls = await nursery.start(serve, bind, name="http")
    except (OSError, ValueError) as err:
        raise listen_failed(address, err, daemon) from err
    except BaseExceptionGroup as group:
        # hypercorn's bind error comes out of its own nursery
        matched, rest = group.split((OSError, ValueError))
        if matched is None or rest is not None:
            raise
        raise listen_failed(address, first_leaf(matched), daemon) from group
    bound_host, _, bound_port = urls[0].rpartition(":")
    return bound_host.split("://", 1)[-1].strip("[]"), int(bound_port)  # http:// or https://


def run_until_signalled(daemon: Daemon, log: logging.Logger, signal_prefix: str = "") -> int:
    """Run `daemon` under Trio until SIGINT/SIGTERM starts its ordered shutdown; the exit
    code. `signal_prefix` goes before the "received SIGTERM" log line (nsqd's ``NSQ: ``)."""
    import trio

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def exit_on_signal() -> None:
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        log.info("%sreceived %s, shutting down", signal_prefix, name)
                        daemon.request_exit()

                nursery.start_soon(exit_on_signal, name="signals")
                await daemon.run()
                nursery.cancel_scope.cancel()

    return _exit_code(lambda: trio.run(main), log)


def _exit_code(run: Callable[[], object], log: logging.Logger) -> int:
    try:
        run()
    except StartupError as err:
        log.critical("%s", err)
        return 1
    except BaseExceptionGroup as group:
        startup, _ = group.split(StartupError)
        if startup is None:
            raise
        log.critical("%s", first_leaf(startup))
        return 1
    return 0
