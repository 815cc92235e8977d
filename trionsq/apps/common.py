"""What the bundled apps (tail, to_nsq, to_file, to_http, nsq_to_nsq) share: go-nsq style
``--consumer-opt``/``--producer-opt`` parsing, repeatable address flags, the app runner (Go's
exit codes, SIGINT/SIGTERM as a graceful stop) and the once-a-second progress line on a TTY."""

from __future__ import annotations

import contextvars
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

import httpx
import trio

from trionsq.client import ClientError
from trionsq.goerrors import address_problem
from trionsq.logs import setup_logging
from trionsq.options import (
    BOOL,
    STRINGS,
    Flag,
    FlagError,
    FlagSet,
    HelpRequested,
    ParsedArgs,
    parse_bool,
    parse_duration_seconds,
    parse_float,
    parse_int,
)
from trionsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from trionsq.version import app_version_string

__all__ = [
    "AppError",
    "Progress",
    "config_options",
    "parse_flags",
    "repeatable",
    "run_trio_app",
    "setup_app_logging",
    "wait_for_signal",
]


class AppError(Exception):
    """A fatal startup or runtime error: one line on stderr, exit 1 (Go's ``log.Fatal``)."""


def _one(value: str) -> list[str]:
    return [value]


def repeatable(name: str, help_: str, attr: str | None = None) -> Flag:
    """A Go ``app.StringArray`` flag: each occurrence adds one value (no comma splitting)."""
    return Flag(name, STRINGS, [], help_, field=attr, cfg=None, parse=_one)


def source_flags() -> list[Flag]:
    """``--nsqd-tcp-address`` and ``--lookupd-http-address``: where a consuming app reads."""
    return [
        repeatable(
            "nsqd-tcp-address",
            "nsqd TCP address (may be given multiple times)",
            "nsqd_tcp_addresses",
        ),
        repeatable(
            "lookupd-http-address",
            "lookupd HTTP address (may be given multiple times)",
            "lookupd_http_addresses",
        ),
    ]


def consumer_opt_flag() -> Flag:
    """``--consumer-opt``, as every consuming app has it."""
    return repeatable(
        "consumer-opt",
        "option to passthrough to nsq.Consumer (may be given multiple times, "
        "http://godoc.org/github.com/nsqio/go-nsq#Config)",
        "consumer_opts",
    )


def version_flag() -> Flag:
    return Flag("version", BOOL, False, "print version string", cfg=None)


# go-nsq Config option name -> (trionsq Consumer/Producer keyword, parser).
_DURATION = parse_duration_seconds
_CONFIG_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "dial_timeout": ("connect_timeout", _DURATION),
    "lookupd_poll_interval": ("lookupd_poll_interval", _DURATION),
    "lookupd_poll_jitter": ("lookupd_poll_jitter", parse_float),
    "max_requeue_delay": ("max_requeue_delay", _DURATION),
    "default_requeue_delay": ("requeue_delay", _DURATION),
    "max_backoff_duration": ("max_backoff_duration", _DURATION),
    "backoff_multiplier": ("backoff_multiplier", _DURATION),
    "max_attempts": ("max_attempts", parse_int),
    "low_rdy_idle_timeout": ("low_rdy_idle_timeout", _DURATION),
    "rdy_redistribute_interval": ("rdy_redistribute_interval", _DURATION),
    "client_id": ("client_id", str),
    "hostname": ("hostname", str),
    "user_agent": ("user_agent", str),
    "heartbeat_interval": ("heartbeat_interval", _DURATION),
    "sample_rate": ("sample_rate", parse_int),
    "tls_v1": ("tls_v1", parse_bool),
    "tls_root_ca_file": ("tls_cafile", str),
    "tls_cert": ("tls_certfile", str),
    "tls_key": ("tls_keyfile", str),
    "deflate": ("deflate", parse_bool),
    "deflate_level": ("deflate_level", parse_int),
    "snappy": ("snappy", parse_bool),
    "output_buffer_size": ("output_buffer_size", parse_int),
    "output_buffer_timeout": ("output_buffer_timeout", _DURATION),
    "max_in_flight": ("max_in_flight", parse_int),
    "msg_timeout": ("msg_timeout", _DURATION),
    "auth_secret": ("auth_secret", str),
}
#: go-nsq options accepted for compatibility but without effect here.
_IGNORED_OPTIONS = frozenset(
    {
        "read_timeout",
        "write_timeout",
        "local_addr",
        "backoff_strategy",
        "low_rdy_timeout",
        "tls_insecure_skip_verify",
        "tls_min_version",
    }
)
_CONSUMER_ONLY = frozenset(
    {
        "lookupd_poll_interval",
        "lookupd_poll_jitter",
        "max_requeue_delay",
        "default_requeue_delay",
        "max_backoff_duration",
        "backoff_multiplier",
        "max_attempts",
        "low_rdy_idle_timeout",
        "rdy_redistribute_interval",
        "max_in_flight",
    }
)


def config_options(opts: Sequence[str], producer: bool = False) -> dict[str, Any]:
    """go-nsq ``ConfigFlag``: each ``key,value`` (a bare ``key`` means ``true``) becomes a
    keyword for `Consumer` (or, with `producer`, `Producer`); raises `AppError`."""
    result: dict[str, Any] = {}
    log = logging.getLogger("trionsq.apps")
    for opt in opts:
        key, sep, value = opt.partition(",")
        key = key.strip()
        if not sep:
            value = "true"
        if key in _IGNORED_OPTIONS:
            log.warning("option %s has no effect in trionsq; ignored", key)
            continue
        entry = _CONFIG_OPTIONS.get(key)
        if entry is None:
            raise AppError(f"invalid option {key}")
        attr, parse = entry
        if producer and key in _CONSUMER_ONLY:
            continue  # go-nsq's Config has them; a Producer just does not use them
        try:
            result[attr] = parse(value)
        except ValueError as exc:
            raise AppError(f"invalid value {value!r} for option {key} - {exc}") from None
    return result


def check_sources(nsqd_tcp_addresses: Sequence[str], lookupd_http_addresses: Sequence[str]) -> None:
    """Go's check: exactly one of --nsqd-tcp-address / --lookupd-http-address; then that
    each can be dialled or parsed (`check_tcp_addresses`, `check_lookupd_addresses`)."""
    if not nsqd_tcp_addresses and not lookupd_http_addresses:
        raise AppError("--nsqd-tcp-address or --lookupd-http-address required")
    if nsqd_tcp_addresses and lookupd_http_addresses:
        raise AppError("use --nsqd-tcp-address or --lookupd-http-address not both")
    check_tcp_addresses(nsqd_tcp_addresses)
    check_lookupd_addresses(lookupd_http_addresses)


def check_tcp_addresses(addresses: Sequence[str]) -> None:
    """An nsqd TCP address without a usable port is go-nsq's dial error, at once
    (``dial tcp: address foo: missing port in address``)."""
    for address in addresses:
        problem = address_problem(address)
        if problem is not None:
            raise AppError(f"dial tcp: {problem}")


def check_lookupd_addresses(addresses: Sequence[str]) -> None:
    """A lookupd address that is no URL is go-nsq's parse error, at once
    (``parse "http://host:abc": invalid port ":abc" after host``)."""
    for address in addresses:
        url = address if "://" in address else f"http://{address}"
        try:
            httpx.URL(url)
        except httpx.InvalidURL as exc:
            _, _, port = url.rpartition(":")
            reason = f'invalid port ":{port}" after host' if not port.isdigit() else exc
            raise AppError(f'parse "{url}": {reason}') from None


def check_names(topics: Sequence[str], channel: str) -> None:
    for topic in topics:
        if not is_valid_topic_name(topic):
            raise AppError(f"--topic is invalid: {topic!r}")
    if channel and not is_valid_channel_name(channel):
        raise AppError(f"--channel is invalid: {channel!r}")


def parse_flags(flagset: FlagSet, argv: Sequence[str]) -> tuple[dict[str, Any], ParsedArgs]:
    """Defaults overlaid with the command line; `FlagError`/`HelpRequested` propagate."""
    parsed = flagset.parse(argv)
    values = flagset.defaults()
    values.update(parsed.values)
    return values, parsed


def setup_app_logging(app: str, level: str = "info", prefix: str | None = None) -> None:
    """NSQ-format log lines on stderr for the app and the client library."""
    prefix = f"[{app}] " if prefix is None else prefix
    setup_logging("trionsq.apps", prefix, level)
    setup_logging("trionsq.client", prefix, level)


def cli(
    command: str,
    binary: str,
    flagset: FlagSet,
    argv: Sequence[str],
    build: Callable[[dict[str, Any]], Any],
    run: Callable[[Any], Awaitable[int | None]],
    *,
    log_level: Callable[[Any], str] | None = None,
    log_prefix: Callable[[Any], str] | None = None,
) -> int:
    """Parse `argv` with `flagset` (exit 2 on bad flags, 0 on -help), answer --version,
    `build` the options (raising `AppError` -> exit 1), set up logging and run the app's trio
    entry point `run(options)`."""
    try:
        values, parsed = parse_flags(flagset, argv)
    except HelpRequested as help_:
        sys.stderr.write(help_.usage)
        return 0
    except FlagError as exc:
        sys.stderr.write(f"trionsq {command}: {exc}\n")
        return 2
    if values.get("version"):
        print(app_version_string(binary))
        return 0
    if parsed.args:
        sys.stderr.write(f"trionsq {command}: unknown arguments: {parsed.args}\n")
        return 1
    try:
        options = build(values)
        level = log_level(options) if log_level else "info"
        prefix = log_prefix(options) if log_prefix else f"[{binary}] "
        try:
            setup_app_logging(binary, level, prefix)
        except ValueError:
            raise AppError("--log-level is invalid") from None
        return run_trio_app(run, options)
    except AppError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1


def run_trio_app(run: Callable[[Any], Awaitable[int | None]], options: Any) -> int:
    """Run the app's trio entry point: its exit code; an `AppError` or a client library error
    (nsqd unreachable, TLS failed, an E_* error frame: Go's ``log.Fatal(err)``) is one line on
    stderr and exit 1."""

    async def main() -> int | None:
        # SIGINT/SIGTERM are caught from the start, as Go's signal.Notify: one that comes
        # while the app connects waits for its wait_for_signal (a graceful stop), instead of
        # killing the process.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            token = _STOP_SIGNALS.set(signals)
            try:
                return await run(options)
            finally:
                _STOP_SIGNALS.reset(token)

    try:
        code = trio.run(main)
    except BaseException as exc:
        leaves = _leaves(exc)
        if leaves and all(isinstance(e, (AppError, ClientError)) for e in leaves):
            sys.stderr.write(f"{leaves[0]}\n")
            return 1
        if leaves and all(isinstance(e, KeyboardInterrupt) for e in leaves):
            return 130
        if leaves and all(isinstance(e, BrokenPipeError) for e in leaves):
            return 0
        raise
    return int(code or 0)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


#: The SIGINT/SIGTERM receiver `run_trio_app` opens before the app starts.
_STOP_SIGNALS: contextvars.ContextVar[Any] = contextvars.ContextVar("stop_signals", default=None)


async def wait_for_signal(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> int:
    """Return the first SIGINT/SIGTERM's number (Go's ``signal.Notify(termChan, ...)``),
    counting those received since `run_trio_app` started the app."""
    received = _STOP_SIGNALS.get()
    if received is not None:
        task_status.started()
        async for signum in received:
            return int(signum)
        return 0  # pragma: no cover
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            return int(signum)
    return 0  # pragma: no cover


class Progress:
    """Counters shown on stderr about once a second while stderr is a terminal (and never
    otherwise): ``name value (rate/s)`` for every counter, on one refreshed line."""

    def __init__(self, counters: Sequence[str], stream: TextIO | None = None) -> None:
        self.counts: dict[str, int] = dict.fromkeys(counters, 0)
        self.stream = sys.stderr if stream is None else stream
        self._last: dict[str, int] = dict(self.counts)
        self._last_time = time.monotonic()
        self._shown = False

    @property
    def enabled(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def line(self, now: float | None = None) -> str:
        """The status line: every counter with its rate since the previous line."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._last_time, 1e-9)
        parts = []
        for name, value in self.counts.items():
            rate = (value - self._last.get(name, 0)) / elapsed
            parts.append(f"{name} {value} ({rate:.0f}/s)")
        self._last = dict(self.counts)
        self._last_time = now
        return "  ".join(parts)

    async def run(self, interval: float = 1.0) -> None:
        """Refresh the line every `interval` seconds until cancelled (a no-op off a TTY)."""
        if not self.enabled:
            return
        try:
            while True:
                await trio.sleep(interval)
                self.stream.write("\r\x1b[K" + self.line())
                self.stream.flush()
                self._shown = True
        finally:
            if self._shown:
                self.stream.write("\n")
                self.stream.flush()
