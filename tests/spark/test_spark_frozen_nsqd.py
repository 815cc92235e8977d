"""An nsqd that stops answering (SIGSTOP) while the staged source reads it: the task fails
within ``readTimeout`` with a message that says which nsqd did not answer what, instead of
holding the micro-batch for two missed heartbeats (61 s); the planner asks the nsqds at once
and plans nothing on the frozen one; the other nsqds' partitions go on, and once the nsqd is
back (SIGCONT) Spark's task retry brings its rows in, each once. An nsqd that is gone (nothing
listens) stages an empty partition rather than failing the task."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from trionsq.testing import DaemonProcess, free_ports, pythonpath_env

from .conftest import channel_stats, http, publish, tcp


@pytest.fixture
def faults(tmp_dir: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fault directory for tasks run in this process (no Spark)."""
    directory = os.path.join(tmp_dir, "faults")
    os.makedirs(directory)
    monkeypatch.setenv("TRIONSQ_SPARK_FAULTS", directory)
    return directory


@pytest.fixture
def frozen() -> Iterator[list[DaemonProcess]]:
    """Daemons the test SIGSTOPs: SIGCONT'd before they are killed."""
    stopped: list[DaemonProcess] = []
    try:
        yield stopped
    finally:
        for daemon in stopped:
            if daemon.proc.poll() is None:
                daemon.proc.send_signal(signal.SIGCONT)


def _options(nsqd: DaemonProcess, topic: str, staging: str, **extra: str) -> Any:
    from trionsq.spark.options import SourceOptions

    return SourceOptions.parse(
        {
            "topic": topic,
            "channel": "spark",
            "nsqd": tcp(nsqd),
            "nsqdHttp": http(nsqd),
            "stagingLocation": staging,
            "readTimeout": "1s",
            **extra,
        }
    )


def _in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = fn(*args)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _wait_for(path: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _read(part: Any, options: Any) -> Any:
    import pyarrow as pa

    from trionsq.spark.executor import _schema, read_partition

    return pa.Table.from_batches(list(read_partition(part, options)), _schema())


def test_a_task_whose_nsqd_freezes_before_its_fins_are_answered_fails_saying_so(
    nsqd: DaemonProcess, tmp_dir: str, faults: str, frozen: list[DaemonProcess]
) -> None:
    """Frozen after the task staged its rows and sent its FINs: CLS gets no answer. The task
    fails (a readTimeout message, not "connection closed" a minute later); its retry returns
    the staged rows, and once nsqd is back no message is returned twice."""
    from trionsq.spark.executor import StagedPartition
    from trionsq.spark.planner import Planner

    bodies = [f"f{i}".encode() for i in range(20)]
    publish(nsqd, "frozen_cls", bodies)
    options = _options(nsqd, "frozen_cls", tmp_dir)
    Planner(options).depths()  # creates the channel
    part = StagedPartition(1, 0, tcp(nsqd), 20, "q")
    with open(os.path.join(faults, "before-cls"), "w") as f:
        f.write("pause")
    thread, outcome = _in_thread(_read, part, options)
    _wait_for(os.path.join(faults, "before-cls.reached"))
    nsqd.proc.send_signal(signal.SIGSTOP)
    frozen.append(nsqd)
    os.unlink(os.path.join(faults, "before-cls"))
    thread.join(30)
    assert not thread.is_alive(), "the task is still waiting for the frozen nsqd"
    error = outcome.get("error")
    assert isinstance(error, RuntimeError), outcome
    assert f"nsqd {tcp(nsqd)} did not answer CLS" in str(error)
    assert "within readTimeout (1 s)" in str(error)

    retry = _read(part, options)  # Spark's retry: from the staging log, nsqd still frozen
    assert sorted(retry.column("body").to_pylist()) == sorted(bodies)

    nsqd.proc.send_signal(signal.SIGCONT)
    # Whatever nsqd makes of the FINs sent before it froze, a later task returns no copy.
    later = StagedPartition(2, 0, tcp(nsqd), 20, "q")
    deadline = time.monotonic() + 30
    while True:
        stats = channel_stats(nsqd, "frozen_cls", "spark")
        if stats["depth"] == 0 and stats["in_flight_count"] == 0:
            break
        assert time.monotonic() < deadline, stats
        if stats["depth"]:
            assert _read(later, options).num_rows == 0
            later = StagedPartition(later.batch + 1, 0, tcp(nsqd), 20, "q")
        time.sleep(0.1)


def test_a_task_whose_nsqd_is_frozen_before_it_connects_fails_within_read_timeout(
    nsqd: DaemonProcess, tmp_dir: str, frozen: list[DaemonProcess]
) -> None:
    from trionsq.spark.executor import StagedPartition
    from trionsq.spark.planner import Planner

    publish(nsqd, "frozen_identify", [b"x"] * 5)
    options = _options(nsqd, "frozen_identify", tmp_dir, connectTimeout="30s")
    Planner(options).depths()
    nsqd.proc.send_signal(signal.SIGSTOP)
    frozen.append(nsqd)
    thread, outcome = _in_thread(_read, StagedPartition(1, 0, tcp(nsqd), 5, "q"), options)
    thread.join(20)  # connectTimeout is 30 s: readTimeout (1 s) must end it first
    assert not thread.is_alive()
    error = outcome.get("error")
    assert isinstance(error, RuntimeError), outcome
    assert f"nsqd {tcp(nsqd)} did not answer IDENTIFY within readTimeout" in str(error)
    assert not os.path.exists(f"{tmp_dir}/q/b1/p0.arrow")  # nothing staged: the retry reads


def test_a_task_whose_nsqd_is_gone_stages_an_empty_partition(tmp_dir: str) -> None:
    """Nothing listens at the planned address (the nsqd was stopped after planning): nothing
    was taken, so the partition is staged empty (a re-run agrees) instead of failing the
    task until Spark gives up on the query."""
    from trionsq.spark.executor import StagedPartition
    from trionsq.spark.options import SourceOptions

    [port] = free_ports(1)
    options = SourceOptions.parse(
        {
            "topic": "gone",
            "channel": "spark",
            "nsqd": f"127.0.0.1:{port}",
            "stagingLocation": tmp_dir,
        }
    )
    table = _read(StagedPartition(3, 0, f"127.0.0.1:{port}", 10, "q"), options)
    assert table.num_rows == 0
    assert os.path.exists(f"{tmp_dir}/q/b3/p0.arrow")
    assert os.path.exists(f"{tmp_dir}/q/b3/p0.fin")


def test_the_planner_plans_nothing_on_a_frozen_nsqd_and_the_rest_as_usual(
    tmp_dir: str, frozen: list[DaemonProcess]
) -> None:
    from trionsq.spark.options import SourceOptions
    from trionsq.spark.planner import Planner

    with (
        DaemonProcess("nsqd", env=pythonpath_env()) as live,
        DaemonProcess("nsqd", env=pythonpath_env()) as stopped,
    ):
        publish(live, "frozen_plan", [b"a"] * 7)
        publish(stopped, "frozen_plan", [b"b"] * 9)
        options = SourceOptions.parse(
            {
                "topic": "frozen_plan",
                "channel": "spark",
                "nsqd": f"{tcp(live)},{tcp(stopped)}",
                "nsqdHttp": f"{http(live)},{http(stopped)}",
                "stagingLocation": tmp_dir,
                "readTimeout": "1s",
            }
        )
        planner = Planner(options)
        assert {d.tcp: d.depth for d in planner.depths()} == {tcp(live): 7, tcp(stopped): 9}
        stopped.proc.send_signal(signal.SIGSTOP)
        frozen.append(stopped)
        assert {d.tcp: d.depth for d in planner.depths()} == {tcp(live): 7, tcp(stopped): 0}
        stopped.proc.send_signal(signal.SIGCONT)
        assert {d.tcp: d.depth for d in planner.depths()} == {tcp(live): 7, tcp(stopped): 9}


def test_a_frozen_nsqd_does_not_hold_the_query_and_its_rows_come_in_once_it_is_back(
    spark: Any, tmp_dir: str, frozen: list[DaemonProcess]
) -> None:
    """Two nsqds; the only task of the first batch (on B) is paused before its CLS while B is
    frozen: the task fails within readTimeout, Spark retries it (its rows, from the staging
    log), and A's messages, published meanwhile, are archived while B is still frozen. Once
    B is back, the rest of its messages come in: every message once."""
    directory = os.environ["TRIONSQ_SPARK_FAULTS"]
    with (
        DaemonProcess("nsqd", env=pythonpath_env()) as a,
        DaemonProcess("nsqd", env=pythonpath_env()) as b,
    ):
        first = [f"b{i}".encode() for i in range(30)]
        publish(b, "frozen_q", first)
        pause = os.path.join(directory, "before-cls")
        with open(pause, "w") as f:
            f.write("pause")
        rows: list[Any] = []
        query = (
            spark.readStream.format("nsq")
            .option("topic", "frozen_q")
            .option("channel", "spark")
            .option("nsqd", f"{tcp(a)},{tcp(b)}")
            .option("nsqdHttp", f"{http(a)},{http(b)}")
            .option("stagingLocation", f"{tmp_dir}/staging")
            .option("readTimeout", "2s")
            .option("maxMessagesPerBatch", "1000")
            .load()
            .writeStream.foreachBatch(lambda df, _: rows.extend(df.collect()))
            .option("checkpointLocation", f"{tmp_dir}/ck")
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            _wait_for(pause + ".reached", 60)
            b.proc.send_signal(signal.SIGSTOP)
            frozen.append(b)
            os.unlink(pause)
            os.unlink(pause + ".reached")
            meanwhile = [f"a{i}".encode() for i in range(40)]
            publish(a, "frozen_q", meanwhile)
            deadline = time.monotonic() + 45  # B's heartbeats would hold the batch 61 s
            while not set(meanwhile) <= {r.body for r in rows}:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, "A's messages waited for the frozen B"
                time.sleep(0.2)
            assert set(first) <= {r.body for r in rows}  # the retry, from the staging log

            b.proc.send_signal(signal.SIGCONT)
            later = [f"c{i}".encode() for i in range(25)]
            publish(b, "frozen_q", later)
            deadline = time.monotonic() + 60
            while not set(later) <= {r.body for r in rows}:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, "B's messages never came in"
                time.sleep(0.2)
        finally:
            query.stop()
        bodies = [r.body for r in rows]
        assert sorted(bodies) == sorted(first + meanwhile + later)  # each once
