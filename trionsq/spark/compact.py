"""Archive housekeeping: `compact` rewrites the small Parquet files of each ``date=`` partition
of an archive into a few large ones (ordered by timestamp), crash-safely.

Per date: the files to replace are listed, read with Spark and written to
``<archive>/_compact/<date>-<uuid>/``; a journal (``_compact/<date>.json``: old files, new files)
is written and fsync'd; the new files are moved into the partition (names starting with
``compacted-``), the old ones deleted, the journal removed. A compaction interrupted after its
journal is finished by the next one (`recover`); before it, its temporary directory is removed.
Files an archive query appends meanwhile are not in the list and are left alone. Readers may see
a date's old and new files together for the moment between the move and the delete.

Local (POSIX) archive paths only."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Any

from .stores import fsync_dir

__all__ = ["CompactResult", "compact", "recover"]

log = logging.getLogger("trionsq.spark")

_DIR = "_compact"


@dataclass
class CompactResult:
    """One date's compaction: files before and after, rows rewritten."""

    date: str
    files_before: int
    files_after: int
    rows: int


def _parquet_files(directory: str) -> list[str]:
    return sorted(
        f for f in os.listdir(directory) if f.endswith(".parquet") and not f.startswith((".", "_"))
    )


def recover(archive: str) -> int:
    """Finish every compaction whose journal exists; drop temporary directories of those that
    never wrote one. Returns how many journals were finished."""
    work = os.path.join(archive, _DIR)
    if not os.path.isdir(work):
        return 0
    finished = 0
    for name in sorted(os.listdir(work)):
        if name.endswith(".json"):
            with open(os.path.join(work, name)) as f:
                journal = json.load(f)
            _apply(archive, journal)
            os.unlink(os.path.join(work, name))
            finished += 1
    for name in os.listdir(work):
        path = os.path.join(work, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
    return finished


def _apply(archive: str, journal: dict[str, Any]) -> None:
    """Move the journal's new files into place (those not moved yet), delete its old ones."""
    partition = os.path.join(archive, journal["partition"])
    for temp, final in journal["new"]:
        if os.path.exists(temp):
            os.replace(temp, os.path.join(partition, final))
    fsync_dir(partition)
    for old in journal["old"]:
        for stale in (old, f".{old}.crc"):  # and the checksum Hadoop's local FS keeps
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(partition, stale))
    fsync_dir(partition)
    shutil.rmtree(journal["temp"], ignore_errors=True)


def compact(
    spark: Any,
    archive: str,
    *,
    target_file_bytes: int = 128 * 1024 * 1024,
    min_files: int = 2,
    dates: list[str] | None = None,
    stop_after_journal: bool = False,
) -> list[CompactResult]:
    """Compact each ``date=`` partition of `archive` (or only `dates`, ``YYYY-MM-DD``) holding
    at least `min_files` Parquet files into ⌈size / `target_file_bytes`⌉ files.
    `stop_after_journal` (testing only) leaves a compaction as a crash after its journal would."""
    from .pipeline import ARCHIVE_DDL

    recover(archive)
    results: list[CompactResult] = []
    if not os.path.isdir(archive):
        return results
    for name in sorted(os.listdir(archive)):
        if not name.startswith("date="):
            continue
        date = name[len("date=") :]
        if dates is not None and date not in dates:
            continue
        partition = os.path.join(archive, name)
        old = _parquet_files(partition)
        if len(old) < min_files:
            continue
        size = sum(os.path.getsize(os.path.join(partition, f)) for f in old)
        n_files = max(1, math.ceil(size / target_file_bytes))
        work = os.path.join(archive, _DIR)
        temp = os.path.join(work, f"{date}-{uuid.uuid4().hex}")
        os.makedirs(work, exist_ok=True)
        df = (
            spark.read.schema(ARCHIVE_DDL)
            .option("basePath", archive)
            .parquet(*(os.path.join(partition, f) for f in old))
            .drop("date")
        )
        rows = df.count()
        df.repartitionByRange(n_files, "timestamp").sortWithinPartitions("timestamp").write.parquet(
            temp
        )
        batch = uuid.uuid4().hex[:12]
        new = [
            (os.path.join(temp, f), f"compacted-{batch}-{i:05d}.parquet")
            for i, f in enumerate(_parquet_files(temp))
        ]
        journal = {"partition": name, "temp": temp, "old": old, "new": new}
        path = os.path.join(work, f"{date}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(journal, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        fsync_dir(work)
        if stop_after_journal:
            return results
        _apply(archive, journal)
        os.unlink(path)
        results.append(CompactResult(date, len(old), len(new), rows))
        log.info("compacted %s: %d files -> %d (%d rows)", name, len(old), len(new), rows)
    return results
