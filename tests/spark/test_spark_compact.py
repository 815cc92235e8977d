"""Archive compaction (`trionsq.spark.compact`, ``trionsq spark compact``): a date's small files
become one with the same rows; an interrupted compaction is finished by the next; files
appended meanwhile are kept; the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from trionsq.spark.compact import compact, recover
from trionsq.spark.pipeline import read_archive
from trionsq.testing import pythonpath_env


def _small_archive(spark: Any, out: str, batches: int, per_batch: int, start: int = 0) -> None:
    """An archive written as the archive job does, one append per batch (two dates)."""
    from trionsq.spark.pipeline import archive_batch

    for b in range(batches):
        rows = [
            (
                f"body {start + b * per_batch + i}".encode(),
                f"{start + b * per_batch + i:016x}",
                # Two dates: 2025-11-24 and 2025-11-25 (UTC).
                1_764_000_000_000_000 + (b % 2) * 86_400_000_000 + i,
            )
            for i in range(per_batch)
        ]
        df = spark.createDataFrame(rows, "body binary, id string, us long").selectExpr(
            "body",
            "id",
            "timestamp_micros(us) as timestamp",
            "1 as attempts",
            "'127.0.0.1:4150' as nsqd",
            "'t' as topic",
        )
        archive_batch(df, b, out, dedup=False)


def _files(out: str, date: str) -> list[str]:
    d = f"{out}/date={date}"
    return sorted(f for f in os.listdir(d) if f.endswith(".parquet") and not f.startswith("."))


def test_compaction_keeps_every_row_in_fewer_files(spark: Any, tmp_dir: str) -> None:
    out = f"{tmp_dir}/archive"
    _small_archive(spark, out, batches=6, per_batch=50)
    before = sorted((r.nsqd, r.id, r.body) for r in read_archive(spark, out).collect())
    dates = sorted(d[5:] for d in os.listdir(out) if d.startswith("date="))
    assert dates == ["2025-11-24", "2025-11-25"]
    assert all(len(_files(out, d)) >= 3 for d in dates)
    results = compact(spark, out)
    assert sorted(r.date for r in results) == dates
    assert all(len(_files(out, d)) == 1 for d in dates)
    after = sorted((r.nsqd, r.id, r.body) for r in read_archive(spark, out).collect())
    assert after == before and len(after) == 300
    assert compact(spark, out) == []  # one file per date: nothing to do
    assert not os.listdir(f"{out}/_compact")


def test_interrupted_compaction_is_finished_by_the_next_and_keeps_new_appends(
    spark: Any, tmp_dir: str
) -> None:
    out = f"{tmp_dir}/archive"
    _small_archive(spark, out, batches=4, per_batch=40)
    before = _files(out, "2025-11-24")
    assert len(before) >= 2
    compact(spark, out, dates=["2025-11-24"], stop_after_journal=True)
    # "Crashed" after its journal: the new file is still in _compact, the old files in place.
    assert _files(out, "2025-11-24") == before
    # The archive appends meanwhile (not part of the interrupted compaction).
    _small_archive(spark, out, batches=1, per_batch=10, start=1000)
    appended = set(_files(out, "2025-11-24")) - set(before)
    assert appended
    assert recover(out) == 1
    files = set(_files(out, "2025-11-24"))
    compacted = {f for f in files if f.startswith("compacted-")}
    assert len(compacted) == 1 and files == compacted | appended
    rows = read_archive(spark, out).collect()
    assert len(rows) == 170 and len({r.id for r in rows}) == 170


def test_cli_compact(spark: Any, tmp_dir: str) -> None:
    out = f"{tmp_dir}/archive"
    _small_archive(spark, out, batches=4, per_batch=20)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "trionsq",
            "spark",
            "compact",
            f"--input={out}",
            "--date=2025-11-25",
            "--master=local[1]",
            "--conf=spark.ui.enabled=false",
            "--conf=spark.driver.bindAddress=127.0.0.1",
            "--conf=spark.driver.host=127.0.0.1",
        ],
        env=pythonpath_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "date=2025-11-25: " in run.stderr and "files -> 1 (40 rows)" in run.stderr
    assert len(_files(out, "2025-11-25")) == 1 and len(_files(out, "2025-11-24")) >= 2
    assert read_archive(spark, out).count() == 80
