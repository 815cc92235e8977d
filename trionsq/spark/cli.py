"""``trionsq spark archive|replay|compact``: the pipeline jobs from the command line. Flags are
parsed before pyspark is imported; bad flags give a one-line error and the usage (exit 2)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["batches_done_since", "main"]

USAGE = """\
usage: trionsq spark archive --topic T (--nsqd-tcp-address A | --lookupd-http-address A)...
                             [--nsqd-http-address A]... [--driver-reader]
                             --output DIR [--channel nsq_archive] [--checkpoint DIR]
                             [--available-now | --trigger-interval 10s] [--run-for SECONDS]
                             [--max-messages-per-batch N] [--max-in-flight N]
                             [--msg-timeout 60s] [--source-opt key=value]...
                             [--master URL] [--conf key=value]...
       trionsq spark replay --input DIR (--nsqd-tcp-address A | --lookupd-http-address A)...
                            [--topic T] [--where SQL] [--from-date D] [--to-date D]
                            [--batch-size N] [--sink-opt key=value]...
                            [--master URL] [--conf key=value]...
       trionsq spark compact --input DIR [--date YYYY-MM-DD]... [--target-file-size-mb 128]
                             [--min-files 2] [--master URL] [--conf key=value]...

archive: stream a topic into Parquet under DIR (partitioned by UTC date, deduplicated by
         nsqd and message id; checkpoint in DIR/_checkpoint unless --checkpoint).
         Executors read nsqd through a staging log in the checkpoint (exactly once);
         --nsqd-http-address (per --nsqd-tcp-address, in order) lets the driver see depth;
         --driver-reader: the driver-side reader instead (at-least-once, deduplicated).
replay:  publish an archive back into a topic (default: each row's own topic).
compact: rewrite each date's small Parquet files of an archive into a few large ones.
"""


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nsqd-tcp-address", action="append", default=[])
    parser.add_argument("--lookupd-http-address", action="append", default=[])
    parser.add_argument("--master", default=None)
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--log-level", default="warn")


def _parser(command: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"trionsq spark {command}", add_help=False)
    _common(parser)
    if command == "compact":
        parser.add_argument("--input", required=True)
        parser.add_argument("--date", action="append", default=None)
        parser.add_argument("--target-file-size-mb", type=float, default=128.0)
        parser.add_argument("--min-files", type=int, default=2)
    elif command == "archive":
        parser.add_argument("--nsqd-http-address", action="append", default=[])
        parser.add_argument("--driver-reader", action="store_true")
        parser.add_argument("--topic", required=True)
        parser.add_argument("--channel", default="nsq_archive")
        parser.add_argument("--output", required=True)
        parser.add_argument("--checkpoint", default=None)
        parser.add_argument("--available-now", action="store_true")
        parser.add_argument("--trigger-interval", default="10s")
        parser.add_argument("--run-for", type=float, default=None)
        parser.add_argument("--max-messages-per-batch", type=int, default=None)
        parser.add_argument("--max-in-flight", type=int, default=None)
        parser.add_argument("--msg-timeout", default=None)
        parser.add_argument("--source-opt", action="append", default=[])
    else:
        parser.add_argument("--input", required=True)
        parser.add_argument("--topic", default=None)
        parser.add_argument("--where", default=None)
        parser.add_argument("--from-date", default=None)
        parser.add_argument("--to-date", default=None)
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument("--sink-opt", action="append", default=[])
    return parser


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise _UsageError(f"{flag} {value!r}: expected key=value")
        out[key.strip()] = val
    return out


def _split(values: Sequence[str]) -> list[str]:
    return [a.strip() for v in values for a in v.split(",") if a.strip()]


def _session(args: argparse.Namespace, app: str, defaults: dict[str, str] | None = None) -> Any:
    """The Spark session of a job: `defaults` under the user's ``--conf``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if args.master:
        builder = builder.master(args.master)
    elif (
        "spark.master" not in _pairs(args.conf, "--conf")
        and not os.environ.get("MASTER")
        # Under spark-submit (its gateway is already up) the master is spark-submit's.
        and not os.environ.get("PYSPARK_GATEWAY_PORT")
    ):
        builder = builder.master("local[*]")
    for key, value in {**(defaults or {}), **_pairs(args.conf, "--conf")}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(args.log_level.upper())
    return spark


def batches_done_since(recent: Sequence[Any], last: int) -> list[tuple[int, int]]:
    """(batch id, input rows) of each micro-batch in `recent` (a query's recentProgress, oldest
    first) that ran after batch `last`, in order. Every batch once: several can run between two
    polls (lastProgress alone skips them). An idle trigger's progress (no batch ran: no
    ``addBatch`` time) repeats the id of the batch still to come, and is not one."""
    done: list[tuple[int, int]] = []
    for progress in recent:
        batch_id = progress["batchId"]
        if batch_id > last and "addBatch" in progress["durationMs"]:
            done.append((batch_id, progress["numInputRows"]))
            last = batch_id
    return done


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _check_staging(args: argparse.Namespace, options: dict[str, str]) -> None:
    """Before Spark starts: the staging log the archive will use (``--source-opt
    stagingLocation``, else ``<checkpoint>/nsq_staging``) is one the staged source can serve."""
    from trionsq.spark.options import find_option, staging_location
    from trionsq.spark.pipeline import checkpoint_staging

    explicit = find_option(options, "stagingLocation")
    if explicit is not None:
        staging_location(explicit, "--source-opt stagingLocation")
        return
    checkpoint_staging(
        args.checkpoint or args.output.rstrip("/") + "/_checkpoint",
        "--checkpoint",
        "give a checkpoint on a shared mount, or --source-opt stagingLocation=/mnt/shared/... "
        "or =s3://bucket/prefix, or --driver-reader",
    )


def _archive(args: argparse.Namespace) -> int:
    from trionsq.spark.options import OptionError, parse_duration

    options = _pairs(args.source_opt, "--source-opt")
    if args.max_messages_per_batch:
        options["maxMessagesPerBatch"] = str(args.max_messages_per_batch)
    if args.max_in_flight:
        options["maxInFlight"] = str(args.max_in_flight)
    if args.msg_timeout:
        options["msgTimeout"] = args.msg_timeout
    try:
        interval = parse_duration(args.trigger_interval, "--trigger-interval")
        if not args.driver_reader:
            _check_staging(args, options)
    except OptionError as exc:
        raise _UsageError(str(exc)) from None
    from trionsq.spark.options import local_path
    from trionsq.spark.pipeline import LOCAL_FILESYSTEM_CONF, archive, stop_between_batches

    local = all(
        local_path(where) is not None for where in (args.output, args.checkpoint or args.output)
    )
    spark = _session(
        args, f"trionsq archive {args.topic}", LOCAL_FILESYSTEM_CONF if local else None
    )

    writing = threading.Event()
    query = archive(
        spark,
        topic=args.topic,
        channel=args.channel,
        nsqd=_split(args.nsqd_tcp_address),
        lookupd=_split(args.lookupd_http_address),
        output=args.output,
        checkpoint=args.checkpoint,
        trigger=f"{interval} seconds",
        available_now=args.available_now,
        options=options,
        nsqd_http=_split(args.nsqd_http_address),
        staged=not args.driver_reader,
        writing=writing,
    )
    stopping: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    deadline = time.monotonic() + args.run_for if args.run_for else None
    last = -1
    try:
        while query.isActive and not stopping:
            query.awaitTermination(0.5)
            for batch_id, rows in batches_done_since(query.recentProgress, last):
                _say(f"batch {batch_id}: {rows} messages")
                last = batch_id
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        if query.isActive:
            # After the batch being written (a second signal: at once).
            stop_between_batches(query, writing, hurry=lambda: len(stopping) > 1)
        failure = query.exception()
        spark.stop()
    if failure is not None:
        _say(f"trionsq spark archive: {failure}")
        return 1
    return 0


def _replay(args: argparse.Namespace) -> int:
    options = _pairs(args.sink_opt, "--sink-opt")
    if args.batch_size:
        options["batchSize"] = str(args.batch_size)
    where = [f"({args.where})"] if args.where else []
    if args.from_date:
        where.append(f"date >= DATE'{args.from_date}'")
    if args.to_date:
        where.append(f"date <= DATE'{args.to_date}'")
    spark = _session(args, "trionsq replay")
    from trionsq.spark.pipeline import read_archive, replay

    try:
        df = read_archive(spark, args.input)
        if where:
            df = df.where(" AND ".join(where))
        df = df.persist()
        count = df.count()
        started = time.monotonic()
        replay(
            spark,
            df=df,
            nsqd=_split(args.nsqd_tcp_address),
            lookupd=_split(args.lookupd_http_address),
            topic=args.topic,
            options=options,
        )
        elapsed = time.monotonic() - started
        _say(f"published {count} messages in {elapsed:.1f}s")
    finally:
        spark.stop()
    return 0


def _compact(args: argparse.Namespace) -> int:
    spark = _session(args, "trionsq compact")
    from trionsq.spark.compact import compact

    try:
        results = compact(
            spark,
            args.input,
            target_file_bytes=int(args.target_file_size_mb * 1024 * 1024),
            min_files=args.min_files,
            dates=args.date,
        )
    finally:
        spark.stop()
    for r in results:
        _say(f"date={r.date}: {r.files_before} files -> {r.files_after} ({r.rows} rows)")
    if not results:
        _say("nothing to compact")
    return 0


def main(argv: Sequence[str]) -> int:
    """``trionsq spark <archive|replay> [flags]``; returns the exit code."""
    args = list(argv)
    if not args or args[0] in ("-h", "-help", "--help", "help"):
        (sys.stdout if args else sys.stderr).write(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in ("archive", "replay", "compact"):
        _say(f"trionsq spark: unknown command {command!r} (archive, replay or compact)")
        sys.stderr.write(USAGE)
        return 2
    if any(a in ("-h", "-help", "--help") for a in rest):
        sys.stdout.write(USAGE)
        return 0
    try:
        parsed = _parser(command).parse_args(rest)
        _pairs(parsed.conf, "--conf")
        if command == "compact":
            if parsed.min_files < 1 or parsed.target_file_size_mb <= 0:
                raise _UsageError("--min-files and --target-file-size-mb must be positive")
            return _compact(parsed)
        if not parsed.nsqd_tcp_address and not parsed.lookupd_http_address:
            raise _UsageError("give --nsqd-tcp-address or --lookupd-http-address")
        if (
            command == "archive"
            and parsed.nsqd_http_address
            and len(_split(parsed.nsqd_http_address)) != len(_split(parsed.nsqd_tcp_address))
        ):
            raise _UsageError("give one --nsqd-http-address per --nsqd-tcp-address")
        if command == "archive":
            return _archive(parsed)
        return _replay(parsed)
    except _UsageError as exc:
        _say(f"trionsq spark {command}: {exc}")
        sys.stderr.write(USAGE)
        return 2
    except Exception as exc:
        _say(f"trionsq spark {command}: {type(exc).__name__}: {_first_line(exc)}")
        return 1


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if "E_" in line:
            return line.strip()
    return text.splitlines()[0] if text else ""
