"""The staged (executor-side) source: tasks read from nsqd, stage in the write-ahead log, FIN,
return the rows. Exactly the published set; a task killed before staging, after staging and
after FIN (Spark retries it) loses and duplicates nothing, in the archive and in a plain
Parquet sink; two nsqds through lookupd; the staging log is emptied as batches commit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from tests.child_lines import ChildLines
from trionsq.spark.pipeline import archive, read_archive
from trionsq.testing import DaemonProcess, pythonpath_env

from .conftest import channel_stats, fault, faults_left, http, publish, tcp


def _stream(spark: Any, topic: str, staging: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("nsq")
        .option("topic", topic)
        .option("channel", "spark")
        .option("stagingLocation", staging)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _available_now(stream: Any, checkpoint: str) -> tuple[Any, list[Any]]:
    rows: list[Any] = []
    query = (
        stream.writeStream.foreachBatch(lambda df, _: rows.extend(df.collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "Trigger.AvailableNow did not stop"
    assert query.exception() is None
    return query, rows


def test_staged_source_reads_exactly_the_published_set(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    bodies = [f"staged {i}".encode() for i in range(1500)]
    publish(nsqd, "stg_exact", bodies)
    staging = f"{tmp_dir}/staging"
    stream = _stream(
        spark, "stg_exact", staging, nsqd=tcp(nsqd), nsqdHttp=http(nsqd), maxMessagesPerBatch="400"
    )
    query, rows = _available_now(stream, f"{tmp_dir}/ck")
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert {r.nsqd for r in rows} == {tcp(nsqd)} and {r.topic for r in rows} == {"stg_exact"}
    assert {r.attempts for r in rows} == {1}
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 400 and sum(sizes) == 1500
    stats = channel_stats(nsqd, "stg_exact", "spark")
    # Every message FIN'd by the task that read it: nothing in flight, nothing timed out.
    assert stats["depth"] == 0 and stats["in_flight_count"] == 0
    assert stats["timeout_count"] == 0
    # Committed batches' staging files are gone (the last one waits for the next commit).
    [log] = os.listdir(staging)  # the query's own directory (named in its offsets)
    batches = [
        d
        for d in os.listdir(f"{staging}/{log}")
        if d.startswith("b")
        and any(f.endswith(".arrow") for f in os.listdir(f"{staging}/{log}/{d}"))
    ]
    assert len(batches) <= 1
    # The others hold only their commit's tombstone.
    others = [d for d in os.listdir(f"{staging}/{log}") if d.startswith("b") and d not in batches]
    assert others and all(os.listdir(f"{staging}/{log}/{d}") == ["committed"] for d in others)


def test_staged_source_without_nsqd_http_reads_everything_then_stops(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    """No /stats (depth unknown): every batch reads; AvailableNow ends once a batch read
    nothing from the nsqd, not after a budget computed from an unknown depth."""
    bodies = [f"blind {i}".encode() for i in range(1000)]
    publish(nsqd, "stg_blind", bodies)
    stream = _stream(
        spark, "stg_blind", f"{tmp_dir}/staging", nsqd=tcp(nsqd), maxMessagesPerBatch="200"
    )
    query, rows = _available_now(stream, f"{tmp_dir}/ck")
    assert sorted(r.body for r in rows) == sorted(bodies)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 5 and max(sizes) <= 200


def test_an_available_now_run_without_nsqd_http_reads_what_came_after_the_last_run(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    """Runs on one checkpoint (an hourly archive, say): a run ends with a batch that read
    nothing, and the next run, on the same checkpoint, still reads what was published since.
    (It took that batch, an earlier run's, for its own and read nothing, ever again.)"""
    stream = _stream(spark, "stg_rerun", f"{tmp_dir}/staging", nsqd=tcp(nsqd))
    for run in range(3):
        bodies = [f"run {run} {i}".encode() for i in range(50)]
        publish(nsqd, "stg_rerun", bodies)
        query, rows = _available_now(stream, f"{tmp_dir}/ck")
        assert sorted(r.body for r in rows) == sorted(bodies), run
        assert query.recentProgress[-1]["numInputRows"] == 0  # ended on a batch that read 0


def _parquet_query(stream: Any, out: str, checkpoint: str, **trigger: Any) -> Any:
    """Spark's plain file sink: no dedup of its own (exactly once only if the source is)."""
    return (
        stream.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


_KILL_OPTIONS = {
    "maxMessagesPerBatch": "300",
    "msgTimeout": "1s",
    "availableNowIdleTimeout": "3s",
}


@pytest.mark.parametrize("point", ["before-stage", "after-stage", "after-fin"])
def test_task_killed_mid_batch_plain_parquet_sink_has_every_message_once(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str, point: str
) -> None:
    """A task's Python worker dies (os._exit) before staging, between staging and FIN, or
    after FIN; Spark retries the task. The plain Parquet sink ends with every message once."""
    topic = "stg_kill_" + point.replace("-", "_")
    bodies = [f"{point} {i}".encode() for i in range(1000)]
    publish(nsqd, topic, bodies)
    fault(point)
    staging = f"{tmp_dir}/staging"
    stream = _stream(spark, topic, staging, nsqd=tcp(nsqd), nsqdHttp=http(nsqd), **_KILL_OPTIONS)
    query = _parquet_query(stream, f"{tmp_dir}/out", f"{tmp_dir}/ck", availableNow=True)
    assert query.awaitTermination(120) and query.exception() is None
    assert faults_left() == []  # the task was killed, and retried
    rows = spark.read.parquet(f"{tmp_dir}/out").select("body", "attempts").collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    stats = channel_stats(nsqd, topic, "spark")
    assert stats["depth"] == 0 and stats["in_flight_count"] == 0
    if point == "after-stage":
        # The killed task's messages came back from nsqd (attempts 2) and were dropped as
        # staged already; its staging file was kept as unconfirmed.
        assert stats["timeout_count"] > 0
        [log] = os.listdir(staging)
        assert os.listdir(f"{staging}/{log}/unconfirmed")


def test_task_killed_between_staging_and_fin_archive_has_every_message_once(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    bodies = [f"arch kill {i}".encode() for i in range(1000)]
    publish(nsqd, "stg_arch_kill", bodies)
    fault("after-stage")
    out = f"{tmp_dir}/archive"
    query = archive(
        spark,
        topic="stg_arch_kill",
        nsqd=[tcp(nsqd)],
        nsqd_http=[http(nsqd)],
        output=out,
        available_now=True,
        options=_KILL_OPTIONS,
    )
    assert query.awaitTermination(120) and query.exception() is None
    assert faults_left() == []
    rows = read_archive(spark, out).collect()
    assert sorted(r.body for r in rows) == sorted(bodies)


_DRIVER = """
import sys, os
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
import trionsq.spark
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
trionsq.spark.register(spark)
topic, nsqd, nsqd_http, staging, out, ck = sys.argv[1:7]
stream = (spark.readStream.format("nsq").option("topic", topic).option("channel", "spark")
    .option("nsqd", nsqd).option("nsqdHttp", nsqd_http).option("stagingLocation", staging)
    .option("maxMessagesPerBatch", "100").option("msgTimeout", "1s").load())
query = (stream.writeStream.format("parquet").option("path", out)
    .option("checkpointLocation", ck).trigger(processingTime="0 seconds").start())
last = -1
while query.isActive:
    query.awaitTermination(0.2)
    p = query.lastProgress
    if p and p["batchId"] != last:
        last = p["batchId"]
        print(f"batch {last}: {p['numInputRows']}", file=sys.stderr, flush=True)
"""


def test_driver_sigkilled_mid_run_then_restarted_plain_parquet_has_every_message_once(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str
) -> None:
    """A driver (its own process and JVM) streaming into a plain Parquet sink is SIGKILLed
    mid-run, then the query is restarted from its checkpoint: every message once, the last
    batch of the killed run not delivered twice."""
    driver_killed_then_restarted(spark, nsqd, tmp_dir, "stg_driver", f"{tmp_dir}/staging")


def driver_killed_then_restarted(
    spark: Any, nsqd: DaemonProcess, tmp_dir: str, topic: str, staging: str
) -> None:
    """The driver-kill round with its staging log at `staging` (a path, or an s3:// URL the
    environment's AWS_* settings reach)."""
    bodies = [f"driver {i}".encode() for i in range(800)]
    publish(nsqd, topic, bodies)
    out, ck = f"{tmp_dir}/out", f"{tmp_dir}/ck"
    script = f"{tmp_dir}/driver.py"
    with open(script, "w") as f:
        f.write(_DRIVER)
    args = [topic, tcp(nsqd), http(nsqd), staging, out, ck]
    proc = subprocess.Popen(
        [sys.executable, script, *args],
        env=pythonpath_env(),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stderr is not None
        driver_lines = ChildLines(proc.stderr, "the driver")
        driver_lines.until(lambda line: line.startswith("batch 3:"), timeout=300)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM at once
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    stream = _stream(
        spark,
        topic,
        staging,
        nsqd=tcp(nsqd),
        nsqdHttp=http(nsqd),
        maxMessagesPerBatch="100",
        msgTimeout="1s",
        availableNowIdleTimeout="3s",
    )
    query = _parquet_query(stream, out, ck, availableNow=True)
    assert query.awaitTermination(120) and query.exception() is None
    rows = spark.read.parquet(out).select("body").collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert channel_stats(nsqd, topic, "spark")["depth"] == 0


def _registered(lookupd_http: str, topic: str, n: int) -> None:
    deadline = time.monotonic() + 15
    url = f"http://{lookupd_http}/lookup?topic={topic}"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if len(json.load(response)["producers"]) == n:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"lookupd does not list {n} nsqds for {topic}")


def test_two_nsqds_through_lookupd_added_and_removed_between_batches(
    spark: Any, tmp_dir: str
) -> None:
    """A continuous query on lookupd: it reads nsqd a; nsqd b, started later, is picked up;
    once a is stopped the query carries on with b. Every message once, from its own nsqd."""
    env = pythonpath_env()
    rows: list[Any] = []
    with DaemonProcess("nsqlookupd", env=env) as lookupd:
        lookupd_tcp = "{}:{}".format(*lookupd.tcp_address)
        flags = [f"--lookupd-tcp-address={lookupd_tcp}", "--broadcast-address=127.0.0.1"]
        with DaemonProcess("nsqd", flags, env=env) as a:
            publish(a, "stg_lookup", [f"a{i}".encode() for i in range(300)])
            _registered(http(lookupd), "stg_lookup", 1)
            stream = _stream(
                spark,
                "stg_lookup",
                f"{tmp_dir}/staging",
                lookupd=http(lookupd),
                lookupdPollInterval="0.5s",
                maxMessagesPerBatch="200",
            )
            query = (
                stream.writeStream.foreachBatch(
                    lambda df, _: rows.extend(df.select("body", "nsqd").collect())
                )
                .option("checkpointLocation", f"{tmp_dir}/ck")
                .trigger(processingTime="0 seconds")
                .start()
            )
            try:
                _until(lambda: len(rows) >= 300, query)
                with DaemonProcess("nsqd", flags, env=env) as b:
                    publish(b, "stg_lookup", [f"b{i}".encode() for i in range(200)])
                    _until(lambda: len(rows) >= 500, query)
                    a.terminate()
                    publish(b, "stg_lookup", [f"c{i}".encode() for i in range(100)])
                    _until(lambda: len(rows) >= 600, query)
                    time.sleep(1)  # nothing more arrives
                    assert query.exception() is None
                    by_nsqd = {tcp(a): set(), tcp(b): set()}
                    for row in rows:
                        by_nsqd[row.nsqd].add(row.body)
                    assert len(rows) == 600
                    assert by_nsqd[tcp(a)] == {f"a{i}".encode() for i in range(300)}
                    assert by_nsqd[tcp(b)] == {
                        f"{p}{i}".encode() for p, n in (("b", 200), ("c", 100)) for i in range(n)
                    }
            finally:
                query.stop()


def _until(predicate: Any, query: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_an_attempt_that_loses_the_claim_returns_the_winners_rows_and_requeues_its_own(
    nsqd: DaemonProcess, tmp_dir: str
) -> None:
    """Two attempts of one task (speculation, or a retry racing a straggler): the one whose
    link fails returns the staged rows of the other and REQs what it took, so nothing is lost
    and nothing is returned twice. (No Spark: the task's function itself.)"""
    import trio

    from trionsq.spark.executor import StagedPartition, _consume, decode_payloads
    from trionsq.spark.options import SourceOptions
    from trionsq.spark.planner import Planner
    from trionsq.spark.staging import StagingLog

    publish(nsqd, "stg_claim", [f"c{i}".encode() for i in range(100)])
    options = SourceOptions.parse(
        {
            "topic": "stg_claim",
            "channel": "spark",
            "nsqd": tcp(nsqd),
            "nsqdHttp": http(nsqd),
            "stagingLocation": tmp_dir,
        }
    )
    Planner(options).depths()  # creates the channel
    staging = StagingLog(f"{tmp_dir}/q")
    winner = decode_payloads(
        [b"\x00" * 8 + b"\x00\x01" + b"%016x" % i + b"winner" for i in range(3)],
        tcp(nsqd),
        "stg_claim",
    )
    assert staging.write(7, 0, winner)  # the other attempt staged first
    part = StagedPartition(7, 0, tcp(nsqd), 100, "q")
    table = trio.run(_consume, part, options, staging)  # past read_partition's first check
    assert table.column("body").to_pylist() == [b"winner"] * 3
    deadline = time.monotonic() + 10
    while channel_stats(nsqd, "stg_claim", "spark")["depth"] != 100:
        assert time.monotonic() < deadline, "the loser's messages did not go back"
        time.sleep(0.1)
    stats = channel_stats(nsqd, "stg_claim", "spark")
    assert stats["requeue_count"] == 100 and stats["in_flight_count"] == 0


def test_messages_that_time_out_before_their_fin_are_dropped_when_they_come_back(
    nsqd: DaemonProcess, tmp_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task slower than msgTimeout between reading and FIN (a loaded executor) while
    another consumer reads the channel (a later batch's task, a stopped run's straggler):
    nsqd delivers the timed-out messages to it and answers the slow task's FINs with
    E_FIN_FAILED. The slow task's staging file must stay unconfirmed, so that the task that
    gets them drops them (FIN, no row): else they are archived twice. (No Spark: the task's
    function itself.)"""
    import socket

    import trio

    from trionsq.protocol.commands import MAGIC_V2, identify, rdy, sub
    from trionsq.spark.executor import StagedPartition, _consume, received
    from trionsq.spark.options import SourceOptions
    from trionsq.spark.planner import Planner
    from trionsq.spark.staging import StagingLog

    bodies = [f"t{i}".encode() for i in range(50)]
    publish(nsqd, "stg_timeout", bodies)
    options = SourceOptions.parse(
        {
            "topic": "stg_timeout",
            "channel": "spark",
            "nsqd": tcp(nsqd),
            "nsqdHttp": http(nsqd),
            "stagingLocation": tmp_dir,
            "msgTimeout": "1s",
        }
    )
    Planner(options).depths()  # creates the channel
    staging = StagingLog(f"{tmp_dir}/q")
    write = StagingLog.write
    other: list[socket.socket] = []

    def slow_write(self: StagingLog, *args: Any) -> bool:
        # Another consumer arrives while this task stalls past msgTimeout: it is sent the
        # messages that time out, and holds them.
        other.append(socket.create_connection(nsqd.tcp_address))
        hello = identify({"msg_timeout": 1000})
        other[0].sendall(MAGIC_V2 + hello + sub("stg_timeout", "spark") + rdy(50))
        time.sleep(2.5)
        return write(self, *args)

    monkeypatch.setattr(StagingLog, "write", slow_write)
    try:
        first = trio.run(_consume, StagedPartition(1, 0, tcp(nsqd), 50, "q"), options, staging)
        monkeypatch.setattr(StagingLog, "write", write)
        assert sorted(first.column("body").to_pylist()) == sorted(bodies)
        taken = channel_stats(nsqd, "stg_timeout", "spark")["in_flight_count"]
        assert taken > 0  # the other consumer holds some: their FINs here failed
        assert not os.path.exists(f"{tmp_dir}/q/b1/p0.fin")  # so the file is unconfirmed
    finally:
        for conn in other:
            conn.close()  # what it holds goes back to the channel when it times out
    deadline = time.monotonic() + 10
    while channel_stats(nsqd, "stg_timeout", "spark")["depth"] < taken:
        assert time.monotonic() < deadline, "the held messages did not come back"
        time.sleep(0.1)

    again = trio.run(_consume, StagedPartition(2, 0, tcp(nsqd), 50, "q"), options, staging)
    assert again.num_rows == 0  # delivered again, dropped as copies of batch 1's rows
    assert received(staging.read(2, 0)) == taken  # received all the same (not drained)
    deadline = time.monotonic() + 10
    while (stats := channel_stats(nsqd, "stg_timeout", "spark"))["in_flight_count"] or stats[
        "depth"
    ]:
        assert time.monotonic() < deadline, f"the copies were not finished: {stats}"
        time.sleep(0.1)


def test_a_batch_of_only_dropped_copies_does_not_end_an_available_now_run(tmp_dir: str) -> None:
    """An nsqd of unknown depth counts as drained once a batch read nothing from it. A batch
    whose messages were all redelivered copies of staged rows (a killed run's, coming back)
    stages no row but did read: the run must go on (it ended there, leaving the rest of the
    topic unread, in a CI run of the CLI kill test)."""
    from trionsq.spark.executor import decode_payloads, with_received
    from trionsq.spark.options import SourceOptions
    from trionsq.spark.source import NSQStagedStreamReader
    from trionsq.spark.staging import StagingLog

    nsqd = "127.0.0.1:1"  # no nsqdHttp: depth unknown, nothing contacted
    reader = NSQStagedStreamReader(
        SourceOptions.parse(
            {"topic": "t", "channel": "c", "nsqd": nsqd, "stagingLocation": tmp_dir}
        )
    )
    reader.prepareForTriggerAvailableNow()
    empty = decode_payloads([], nsqd, "t")
    StagingLog(f"{tmp_dir}/q").write(4, 0, with_received(empty, 50))
    start = {"log": "q", "batch": 4, "plan": [[nsqd, 50]]}
    assert [d.depth for d in reader._depths(start)] == [None]  # not drained: plan a read

    StagingLog(f"{tmp_dir}/q").write(5, 0, with_received(empty, 0))
    start = {"log": "q", "batch": 5, "plan": [[nsqd, 50]]}
    assert [d.depth for d in reader._depths(start)] == [0]  # read nothing: drained


def test_a_straggler_of_a_committed_batch_takes_nothing_or_gives_it_back(
    nsqd: DaemonProcess, tmp_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt of a task still running after its batch was committed with another
    attempt's rows (a lost executor's): if it starts after the commit it takes nothing; if the
    commit deleted the batch's files between its check and its claim, its claim succeeds, and
    then it must not FIN (its rows would be read by nobody: the messages would be lost) but
    discard its file and REQ the messages."""
    import trio

    from trionsq.spark.executor import StagedPartition, _consume, decode_payloads, read_partition
    from trionsq.spark.options import SourceOptions
    from trionsq.spark.planner import Planner
    from trionsq.spark.staging import StagingLog

    publish(nsqd, "stg_straggler", [f"s{i}".encode() for i in range(20)])
    options = SourceOptions.parse(
        {
            "topic": "stg_straggler",
            "channel": "spark",
            "nsqd": tcp(nsqd),
            "nsqdHttp": http(nsqd),
            "stagingLocation": tmp_dir,
        }
    )
    Planner(options).depths()  # creates the channel
    staging = StagingLog(f"{tmp_dir}/q")
    winner = decode_payloads([b"\x00" * 8 + b"\x00\x01" + b"%016x" % 1 + b"w"], tcp(nsqd), "t")
    assert staging.write(3, 0, winner)
    staging.confirm(3, 0)
    staging.commit(3)
    assert staging.committed(3) and staging.read(3, 0) is None

    part = StagedPartition(3, 0, tcp(nsqd), 20, "q")
    assert list(read_partition(part, options)) == []  # took nothing
    stats = channel_stats(nsqd, "stg_straggler", "spark")
    assert stats["depth"] == 20 and stats["in_flight_count"] == 0

    # The commit lands between the attempt's check and its claim.
    write = StagingLog.write

    def commit_first(self: StagingLog, batch: int, partition: int, rows: Any) -> bool:
        self.commit(batch)
        return write(self, batch, partition, rows)

    part = StagedPartition(4, 0, tcp(nsqd), 20, "q")
    assert staging.write(4, 0, winner)  # the winner's, unconfirmed
    staging.store.delete(["b4/p0.arrow"])  # as if committed while the straggler read
    monkeypatch.setattr(StagingLog, "write", commit_first)
    trio.run(_consume, part, options, staging)
    monkeypatch.setattr(StagingLog, "write", write)
    assert staging.committed(4) and staging.read(4, 0) is None  # discarded
    assert staging.unconfirmed_ids(tcp(nsqd)) == set()  # not counted as staged
    deadline = time.monotonic() + 10
    while (stats := channel_stats(nsqd, "stg_straggler", "spark"))["depth"] != 20:
        assert time.monotonic() < deadline, f"the straggler's messages did not go back: {stats}"
        time.sleep(0.1)
    assert stats["requeue_count"] == 20  # and the depth is back to 20: none FIN'd
