"""The pipeline jobs: `archive` (a streaming query writing a topic to Parquet partitioned by
UTC date, exactly once per (nsqd, id)) and `replay` (a batch job publishing an archive, or any
DataFrame with a body column, back into a topic).

Dedup: each micro-batch is written by `archive_batch` (``foreachBatch``). With the staged source
(the default) a batch is appended as it is, except a re-run after a restart (the batch the
checkpoint has offsets but no commit for), which is checked like every batch of the driver-side
reader: duplicates inside the batch are dropped, then rows whose (nsqd, id) is already in the
archive for the same dates are dropped by an anti-join. A message's date and timestamp never
change on redelivery, so only the batch's date partitions (and only files holding timestamps at
or past the batch's oldest) are read. Whatever a crashed run left in the archive therefore
counts, and a replayed or redelivered message adds no row.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .options import (
    S3_SCHEMES,
    OptionError,
    find_option,
    local_path,
    location_scheme,
    staging_location,
)

#: Spark settings for an archive whose output and checkpoint are local paths. Without the
#: native Hadoop library (pyspark ships none), Hadoop's local file system forks a `chmod` for
#: every file and directory it creates and a `readlink` per file of every checkpoint rename:
#: about 38 processes a micro-batch, ~0.2 s of a 50,000-message batch on 2 cores. The
#: FileSystem-based checkpoint manager renames without the readlinks (one writer per
#: checkpoint, as Spark requires anyway); the raw local file system writes no `.crc` sidecar
#: (and chmods it not); no `_SUCCESS` file, which an appended-to archive never meant.
LOCAL_FILESYSTEM_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}

__all__ = [
    "ARCHIVE_DDL",
    "LOCAL_FILESYSTEM_CONF",
    "archive",
    "archive_batch",
    "checkpoint_staging",
    "read_archive",
    "replay",
    "stop_between_batches",
]

log = logging.getLogger("trionsq.spark")

#: The archive's columns: the source's, plus ``date`` (UTC, the partition column).
ARCHIVE_DDL = (
    "body binary, id string, timestamp timestamp, attempts int, nsqd string, topic string, "
    "date date"
)
#: The Hadoop setting that names a write job's directory under ``<output>/_temporary``.
_JOB_ATTEMPT = "mapreduce.job.application.attempt.id"
_KEY = ["nsqd", "id"]
_COLUMNS = ["body", "id", "timestamp", "attempts", "nsqd", "topic", "date"]
_DAY_US = 86_400_000_000


def _with_date(df: Any) -> Any:
    from pyspark.sql import functions as F

    # Days since the epoch from the microseconds: UTC whatever the session time zone.
    days = F.floor(F.unix_micros(F.col("timestamp")) / F.lit(_DAY_US)).cast("int")
    return df.withColumn("date", F.date_from_unix_date(days))


def read_archive(spark: Any, path: str) -> Any:
    """The archive at `path` as a DataFrame (empty if it does not exist yet)."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.schema(ARCHIVE_DDL).parquet(path)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc.getCondition() or exc):
            raise
        return spark.createDataFrame([], ARCHIVE_DDL)


def _append(rows: Any, output: str) -> None:
    """Append `rows` (the archive's columns) to the archive at `output`, committing only the
    output of this write's own tasks.

    Why the job attempt: by default every write to `output` stages its tasks' files in
    ``<output>/_temporary/0``, and Hadoop's FileOutputCommitter commits every task directory
    it finds there. A query stopped or killed in the middle of a write aborts its job, but a
    task still running may commit after the abort: the archive's next write then committed
    that batch's rows too, past the dedup, which reads only the committed archive (seen as a
    whole batch archived twice after a stop). With an attempt number of its own (random, one
    of 2^31 - 2: two writes of a directory drawing the same is a one-in-two-billion chance), a
    write commits only its own tasks' files, and its clean-up removes whatever an aborted one
    left under ``_temporary``."""
    attempt = secrets.randbelow(2**31 - 2) + 1  # 0 is every other writer's
    writer = rows.select(*_COLUMNS).write.mode("append").partitionBy("date")
    writer.option(_JOB_ATTEMPT, str(attempt)).parquet(output)


def archive_batch(batch: Any, batch_id: int, output: str, dedup: bool = True) -> int | None:
    """Append the rows of one micro-batch that the archive at `output` does not hold yet;
    returns the number of distinct (nsqd, id) in the batch. Without `dedup` the rows are
    appended as they are (one Spark job; returns None): for batches known to hold no row the
    archive has (see `archive`)."""
    from pyspark.sql import functions as F

    if not dedup:
        _append(_with_date(batch), output)
        return None
    spark = batch.sparkSession
    rows = _with_date(batch).dropDuplicates(_KEY).persist()
    try:
        info = rows.agg(
            F.count(F.lit(1)).alias("n"),
            F.min("timestamp").alias("oldest"),
            F.collect_set("date").alias("dates"),
        ).first()
        if info is None or not info["n"]:
            return 0
        existing = (
            read_archive(spark, output)
            .where(F.col("date").isin(list(info["dates"])))
            .where(F.col("timestamp") >= F.lit(info["oldest"]))
            .select(*_KEY)
        )
        # No count of its own: a Spark job costs ~0.3 s per micro-batch on local Spark.
        _append(rows.join(existing, _KEY, "left_anti"), output)
        return int(info["n"])
    finally:
        rows.unpersist()


def archive(
    spark: Any,
    *,
    topic: str,
    output: str,
    checkpoint: str | None = None,
    channel: str = "nsq_archive",
    nsqd: Sequence[str] = (),
    lookupd: Sequence[str] = (),
    trigger: str | None = "10 seconds",
    available_now: bool = False,
    options: Mapping[str, str] | None = None,
    query_name: str | None = None,
    nsqd_http: Sequence[str] = (),
    staged: bool = True,
    writing: threading.Event | None = None,
) -> Any:
    """Start the archive query (returns the StreamingQuery): `topic`/`channel` from `nsqd`
    and/or `lookupd` into Parquet under `output` partitioned by ``date``, checkpointed in
    `checkpoint` (default ``<output>/_checkpoint``, which Spark's readers skip). `trigger` is a
    processing-time interval; `available_now` archives what is there and stops.

    `staged` (the default): executors read from nsqd through the staging log, in the
    ``stagingLocation`` of `options` if given, else in ``<checkpoint>/nsq_staging`` (a local
    checkpoint only: `checkpoint_staging`); `nsqd_http`, the nsqds' HTTP addresses in the
    order of `nsqd`, lets the driver see their depth. Otherwise the driver-side reader.

    `writing`, if given, is set while a micro-batch is read and appended: pass it to
    `stop_between_batches` to stop the query without interrupting one."""
    from . import register

    register(spark)
    checkpoint = checkpoint or output.rstrip("/") + "/_checkpoint"
    reader = (
        spark.readStream.format("nsq")
        .option("topic", topic)
        .option("channel", channel)
        .option("nsqd", ",".join(nsqd))
        .option("lookupd", ",".join(lookupd))
    )
    if staged:
        if find_option(options or {}, "stagingLocation") is None:
            # An explicit stagingLocation (set with the other options below) wins.
            reader = reader.option("stagingLocation", checkpoint_staging(checkpoint))
        if nsqd_http:
            reader = reader.option("nsqdHttp", ",".join(nsqd_http))
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    stream = reader.load()
    # The staged source delivers every message once, in one batch, and a batch re-run after a
    # restart holds the same rows. Only a re-run (of a batch whose append may have happened
    # before the crash) is checked against the archive: the batch the checkpoint has offsets
    # but no commit for (when the checkpoint cannot be listed here: the run's first batch).
    # Later batches are appended as they are. The driver-side reader redelivers messages in
    # later batches: every batch is checked.
    rerun = _uncommitted_batch(checkpoint)
    first = [True]
    in_batch = writing if writing is not None else threading.Event()

    def write(df: Any, batch_id: int) -> None:
        if not staged:
            dedup = True
        elif rerun == "unknown":
            dedup = first[0]
        else:
            dedup = batch_id == rerun
        in_batch.set()
        try:
            archive_batch(df, batch_id, output, dedup=dedup)
        finally:
            in_batch.clear()
        first[0] = False

    writer = stream.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    if query_name:
        writer = writer.queryName(query_name)
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger:
        writer = writer.trigger(processingTime=trigger)
    return writer.start()


def stop_between_batches(
    query: Any,
    writing: threading.Event,
    timeout: float = 30.0,
    hurry: Callable[[], bool] = lambda: False,
) -> None:
    """Stop an archive query (started with `writing`) once the micro-batch it is writing is
    written, waiting at most `timeout` seconds, or until `hurry()` (a second Ctrl-C, say).

    Why: `query.stop()` interrupts the batch being written. Nothing is lost (the batch runs
    again at the next start, and `_append` commits no file of an aborted write), but Spark
    aborts the write's job and prints a thousand lines of Java traces, a StackOverflowError
    among them. Between batches, a stop interrupts only the planning of the next one. (The
    next batch may start between the wait and the stop: rarely, and as safe as before.)"""
    deadline = time.monotonic() + timeout
    while writing.is_set() and time.monotonic() < deadline and not hurry():
        time.sleep(0.01)
    query.stop()


def _uncommitted_batch(checkpoint: str) -> int | str | None:
    """The batch id Spark will re-run when the query restarts from `checkpoint` (offsets
    written, commit not), None if none, "unknown" if the checkpoint is not a local path."""
    path = local_path(checkpoint)
    if path is None:
        return "unknown"

    def ids(name: str) -> list[int]:
        try:
            return [int(f) for f in os.listdir(os.path.join(path, name)) if f.isdigit()]
        except FileNotFoundError:
            return []

    offsets, commits = ids("offsets"), ids("commits")
    if offsets and max(offsets) > max(commits, default=-1):
        return max(offsets)
    return None


def replay(
    spark: Any,
    *,
    nsqd: Sequence[str] = (),
    lookupd: Sequence[str] = (),
    topic: str | None = None,
    input: str | None = None,
    df: Any = None,
    where: str | None = None,
    options: Mapping[str, str] | None = None,
) -> None:
    """Publish `df` (or the archive at `input`, filtered by the SQL condition `where`) to
    `topic`, or each row to its own ``topic`` column when `topic` is None."""
    from . import register

    register(spark)
    if df is None:
        if input is None:
            raise ValueError("give input (an archive path) or df")
        df = read_archive(spark, input)
    if where:
        df = df.where(where)
    columns = [c for c in ("body", "value") if c in df.columns][:1]
    if topic is None:
        columns.append("topic")
    writer = (
        df.select(*columns)
        .write.format("nsq")
        .mode("append")
        .option("nsqd", ",".join(nsqd))
        .option("lookupd", ",".join(lookupd))
    )
    if topic:
        writer = writer.option("topic", topic)
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    writer.save()


def checkpoint_staging(
    checkpoint: str,
    name: str = "checkpoint",
    hint: str = "give options={'stagingLocation': '/mnt/shared/...' or 's3://bucket/prefix'}, "
    "or staged=False",
) -> str:
    """The archive's staging location when no ``stagingLocation`` is given:
    ``<checkpoint>/nsq_staging``, a relative local path made absolute (the driver's working
    directory, as Spark resolves the checkpoint). A checkpoint elsewhere is refused
    (OptionError naming `name`, then `hint`): on a store the staged source cannot serve, or on
    S3, where staging is chosen explicitly: Spark writes the checkpoint through Hadoop's S3A
    (``fs.s3a.*`` settings), the staging log is written by boto3 in every Python worker (the
    AWS chain), and the two need not reach the same store."""
    try:
        scheme = location_scheme(checkpoint)
        if scheme in S3_SCHEMES:
            raise OptionError(
                f"{name}: {checkpoint!r} is on {scheme}: storage, where the archive does not "
                "stage by itself"
            )
        if not scheme:
            return os.path.abspath(checkpoint).rstrip("/") + "/nsq_staging"
        return staging_location(checkpoint, name).rstrip("/") + "/nsq_staging"
    except OptionError as exc:
        raise OptionError(
            f"{exc} (the staging log goes in <checkpoint>/nsq_staging: {hint})"
        ) from None
