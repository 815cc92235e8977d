"""The pipeline: ``archive`` (topic -> Parquet by date, deduplicated) survives a stop between
batches and restarts from its checkpoint without losing or duplicating a message; ``replay``
publishes an archive back into a topic; the ``trionsq spark`` command line."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.child_lines import ChildLines
from trionsq.spark.pipeline import archive, read_archive, replay
from trionsq.testing import DaemonProcess, pythonpath_env

from .conftest import channel_stats, consume, http, publish, tcp


def _wait(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.parametrize("staged", [True, False], ids=["staged", "driver-reader"])
def test_archive_stop_between_batches_and_restart_loses_and_duplicates_nothing(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str, staged: bool
) -> None:
    topic = "pipe_arch" if staged else "pipe_arch_driver"
    bodies = [f"archived {i}".encode() for i in range(1000)]
    publish(nsqd, topic, bodies)
    out = f"{tmp_dir}/archive"
    options = {"maxMessagesPerBatch": "150", "msgTimeout": "1s", "availableNowIdleTimeout": "2s"}
    common = dict(topic=topic, nsqd=[tcp(nsqd)], output=out, options=options, staged=staged)

    # Run 1: a continuous query, stopped after a few batches.
    query = archive(spark, trigger="0 seconds", **common)
    _wait(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 450)
    query.stop()
    first = read_archive(spark, out).count()
    assert 0 < first < len(bodies)

    # Run 2 (from the checkpoint): everything else (driver-side reader: and the messages of
    # run 1's last batches, never FIN'd, delivered again).
    query = archive(spark, available_now=True, **common)
    assert query.awaitTermination(120) and query.exception() is None
    # Run 3: nothing new. The staged source delivers nothing again; the driver-side reader
    # delivers run 2's last batch again (its commit came only now), and the archive's dedup
    # adds no row for it.
    query = archive(spark, available_now=True, **common)
    assert query.awaitTermination(120) and query.exception() is None
    replayed = sum(p["numInputRows"] for p in query.recentProgress)
    if staged:
        assert replayed == 0
    else:
        assert replayed > 0

    rows = read_archive(spark, out).collect()
    assert sorted(r.body for r in rows) == sorted(bodies)  # every body exactly once
    assert len({(r.nsqd, r.id) for r in rows}) == len(bodies)
    assert {str(r.date) for r in rows} == {r.timestamp.strftime("%Y-%m-%d") for r in rows}
    assert channel_stats(nsqd, topic, "nsq_archive")["depth"] == 0


def test_files_an_aborted_write_left_behind_are_not_archived(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    """A query stopped in the middle of a write aborts the write's job, but a task still
    running may commit its files after the abort, under the archive's ``_temporary``. The
    archive's next write must not commit them: they once made a whole batch archived twice."""
    first = [f"first {i}".encode() for i in range(100)]
    publish(nsqd, "pipe_orphan", first)
    out = f"{tmp_dir}/archive"
    options = {"availableNowIdleTimeout": "2s"}
    common = dict(topic="pipe_orphan", nsqd=[tcp(nsqd)], output=out, options=options)
    query = archive(spark, available_now=True, **common)
    assert query.awaitTermination(120) and query.exception() is None
    # What such a task leaves: its task directory, committed in its job's attempt directory
    # (0, every write's by default, or any other).
    part = next(Path(out).glob("date=*/part-*.parquet"))
    for attempt in ("0", "7"):
        left = Path(out, "_temporary", attempt, "task_202611280000_0001_m_000000", part.parent.name)
        left.mkdir(parents=True)
        shutil.copy(part, left / "part-left.parquet")
    then = [f"then {i}".encode() for i in range(100)]
    publish(nsqd, "pipe_orphan", then)
    query = archive(spark, available_now=True, **common)
    assert query.awaitTermination(120) and query.exception() is None
    rows = read_archive(spark, out).collect()
    assert sorted(r.body for r in rows) == sorted(first + then)  # every body exactly once
    assert not Path(out, "_temporary").exists()  # the committed write cleared what was left


def test_replay_publishes_the_archive_back(spark: Any, nsqd: DaemonProcess, tmp_dir: str) -> None:
    bodies = [f"replayed {i}".encode() for i in range(800)]
    publish(nsqd, "pipe_src", bodies)
    out = f"{tmp_dir}/archive"
    query = archive(
        spark,
        topic="pipe_src",
        nsqd=[tcp(nsqd)],
        output=out,
        available_now=True,
        options={"availableNowIdleTimeout": "1s"},
    )
    assert query.awaitTermination(120) and query.exception() is None
    replay(spark, input=out, nsqd=[tcp(nsqd)], topic="pipe_dst")
    assert sorted(consume(nsqd, "pipe_dst", len(bodies))) == sorted(bodies)
    # Without a topic, rows go back to their own topic (the archive's topic column).
    url = f"http://{http(nsqd)}/channel/create?topic=pipe_src&channel=check"
    urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=5).close()
    replay(spark, input=out, nsqd=[tcp(nsqd)], where="body LIKE 'replayed 1%'")
    expected = sorted(b for b in bodies if b.startswith(b"replayed 1"))
    assert sorted(consume(nsqd, "pipe_src", len(expected), timeout=10)) == expected


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["sigkill", "ctrl-c"])
def test_cli_archive_stopped_then_restarted_from_its_checkpoint(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str, stop: signal.Signals
) -> None:
    """`trionsq spark archive` in its own process (driver and JVM) SIGKILLed mid-stream, or
    stopped with Ctrl-C (after the batch it is writing: exit 0), then the archive restarted
    from the same checkpoint: every message once."""
    topic = f"pipe_cli_{stop.name.lower()}"
    bodies = [f"cli {i}".encode() for i in range(600)]
    publish(nsqd, topic, bodies)
    out = f"{tmp_dir}/archive"
    # Small batches, so that the kill (after the line of batch 2) comes well before the end
    # however fast batches run; the restart takes the rest in larger ones.
    options = {"maxMessagesPerBatch": "20", "msgTimeout": "1s", "availableNowIdleTimeout": "2s"}
    cmd = [
        sys.executable,
        "-m",
        "trionsq",
        "spark",
        "archive",
        f"--topic={topic}",
        f"--output={out}",
        f"--nsqd-tcp-address={tcp(nsqd)}",
        "--trigger-interval=0s",
        *(f"--source-opt={k}={v}" for k, v in options.items()),
        "--master=local[2]",
        "--log-level=error",
        "--conf=spark.ui.enabled=false",
        "--conf=spark.ui.showConsoleProgress=false",
        "--conf=spark.driver.bindAddress=127.0.0.1",
        "--conf=spark.driver.host=127.0.0.1",
        "--conf=spark.sql.shuffle.partitions=2",
    ]
    proc = subprocess.Popen(
        cmd, env=pythonpath_env(), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stderr is not None
        archive_lines = ChildLines(proc.stderr, "the archive process")
        lines = archive_lines.until(lambda line: line.startswith("batch 2:"), timeout=300)
        if stop == signal.SIGINT:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=120) == 0, archive_lines.rest(timeout=10)[-3000:]
    finally:
        # Its own session: the driver and its JVM at once (gone already after a clean exit).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    # One line per micro-batch, none skipped (however many ran between the CLI's polls).
    assert [line.split(":")[0] for line in lines if line.startswith("batch ")] == [
        "batch 0",
        "batch 1",
        "batch 2",
    ], lines
    killed_with = read_archive(spark, out).count()
    assert killed_with < len(bodies)
    # The CLI's local file-system settings (pipeline.LOCAL_FILESYSTEM_CONF): no checksum
    # sidecars, no _SUCCESS, through the kill and the restart below all the same.
    written = [f for _, _, files in os.walk(out) for f in files]
    assert any(f.endswith(".parquet") for f in written)
    assert not [f for f in written if f.endswith(".crc") or f == "_SUCCESS"], written
    query = archive(
        spark,
        topic=topic,
        nsqd=[tcp(nsqd)],
        output=out,
        available_now=True,
        options={**options, "maxMessagesPerBatch": "200"},
    )
    assert query.awaitTermination(120) and query.exception() is None
    rows = read_archive(spark, out).collect()
    assert sorted(r.body for r in rows) == sorted(bodies)


def test_cli_bad_flags_give_one_line_and_usage() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "trionsq", "spark", "archive", "--topic=x", "--bogus"],
        env=pythonpath_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    first = run.stderr.splitlines()[0]
    assert first.startswith("trionsq spark archive: ") and "usage:" in run.stderr
