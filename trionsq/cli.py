"""The `trionsq` command: `trionsq <daemon-or-app> [NSQ-compatible flags]`, dispatching to nsqd,
nsqlookupd, the bench tool and the bundled NSQ apps (also under Go's binary names), with Go's
exit codes and one-line errors."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence

import trionsq
from trionsq.version import version_string

__all__ = ["main", "version_string"]

_USAGE = """\
usage: trionsq <command> [flags]

NSQ {nsq} rewritten in Python on Trio (trionsq {ours}); flags and config files as in NSQ.

commands:
  nsqd         the queue daemon (trionsq nsqd --help for its flags)
  nsqlookupd   the directory service nsqds register with (also: lookupd)
  bench        throughput / latency / memory benchmarks
  stat         nsq_stat: a channel's totals across its nsqds, every --interval
  tail         nsq_tail: print a topic's messages to stdout (also: nsq_tail)
  to_nsq       publish stdin, split on --delimiter, to a topic
  to_file      nsq_to_file: archive topics to (gzipped, rotated) files (also: nsq_to_file)
  to_http      nsq_to_http: GET/POST each message to HTTP endpoints (also: nsq_to_http)
  nsq_to_nsq   relay topics from one cluster to other nsqds
  spark        Spark jobs: archive a topic to Parquet, replay, compact (trionsq spark --help)
  nsqadmin     the web UI and admin API over nsqlookupd / nsqd (also: admin)
"""


def _err(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _daemon(command: str, app: str, argv: Sequence[str]) -> int:
    """Parse, validate and run a daemon (`app`: ``nsqd``, ``nsqlookupd`` or ``nsqadmin``) as
    Go's does: exit 2 for bad flags, 1 for invalid values, `--version` and `--help` answered at
    once."""
    from trionsq.logs import setup_logging
    from trionsq.options import FlagError, HelpRequested, ValidationError

    if app == "nsqd":
        from trionsq.nsqd.main import run
        from trionsq.nsqd.options import parse_nsqd_args as parse
    elif app == "nsqadmin":
        from trionsq.nsqadmin.main import run  # type: ignore[assignment]
        from trionsq.nsqadmin.options import (  # type: ignore[assignment]
            parse_nsqadmin_args as parse,
        )
    else:
        from trionsq.nsqlookupd.main import run  # type: ignore[assignment]
        from trionsq.nsqlookupd.options import (  # type: ignore[assignment]
            parse_nsqlookupd_args as parse,
        )
    try:
        options = parse(argv)
    except HelpRequested as help_:
        sys.stderr.write(help_.usage)
        return 0
    except FlagError as exc:
        _err(f"trionsq {command}: {exc}")
        return 2
    if options.version:
        print(version_string(app))
        return 0
    try:
        options.validate()
    except ValidationError as exc:
        _err(f"trionsq {command}: {exc}")
        return 1
    setup_logging(f"trionsq.{app}", options.log_prefix, options.log_level)
    try:
        return run(options)
    except KeyboardInterrupt:
        return 130


def _stat(argv: Sequence[str]) -> int:
    from trionsq.apps.stat import main as stat_main

    return stat_main(list(argv))


def _app(module: str, command: str, argv: Sequence[str]) -> int:
    import importlib

    app_main = importlib.import_module(f"trionsq.apps.{module}").main
    return int(app_main(list(argv), command))


def _spark(argv: Sequence[str]) -> int:
    from trionsq.spark.cli import main as spark_main

    return spark_main(list(argv))


def _bench(argv: Sequence[str]) -> int:
    from trionsq.apps.bench import main as bench_main

    return bench_main(list(argv))


_COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "nsqd": functools.partial(_daemon, "nsqd", "nsqd"),
    "nsqlookupd": functools.partial(_daemon, "nsqlookupd", "nsqlookupd"),
    "lookupd": functools.partial(_daemon, "lookupd", "nsqlookupd"),
    "nsqadmin": functools.partial(_daemon, "nsqadmin", "nsqadmin"),
    "admin": functools.partial(_daemon, "admin", "nsqadmin"),
    "bench": _bench,
    "spark": _spark,
    "stat": _stat,
    "nsq_stat": _stat,
    **{
        name: functools.partial(_app, module, name)
        for name, module in (
            ("tail", "tail"),
            ("nsq_tail", "tail"),
            ("to_nsq", "to_nsq"),
            ("to_file", "to_file"),
            ("nsq_to_file", "to_file"),
            ("to_http", "to_http"),
            ("nsq_to_http", "to_http"),
            ("nsq_to_nsq", "nsq_to_nsq"),
        )
    },
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trionsq <command> [flags]``; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = _USAGE.format(nsq=trionsq.NSQ_VERSION, ours=trionsq.__version__)
    if not args:
        sys.stderr.write(usage)
        return 2
    command, rest = args[0], args[1:]
    if command in ("-h", "-help", "--help", "help"):
        sys.stdout.write(usage)
        return 0
    if command in ("-version", "--version", "version"):
        print(f"trionsq {trionsq.__version__} (nsq {trionsq.NSQ_VERSION})")
        return 0
    handler = _COMMANDS.get(command)
    if handler is not None:
        return handler(rest)
    _err(f"trionsq: unknown command {command!r} (see trionsq --help)")
    return 2
