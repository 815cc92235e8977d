"""The staging log on its two stores, a POSIX directory and S3 (moto's S3 server on 127.0.0.1):
the same writes, reads, claims, confirmations, commits and unconfirmed ids, file for file; two
executor processes racing to stage one (batch, partition) (one wins, both return its rows);
and the S3 claim's corner cases (a 412 answering a retry of its own PUT, 409 conflicts). No
Spark session."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

import pyarrow as pa
from botocore.exceptions import ClientError

from tests.child_lines import ChildLines
from trionsq.spark import stores
from trionsq.spark.staging import StagingLog
from trionsq.testing import pythonpath_env

from .s3server import S3Server, put_requests


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """boto3's standard chain in this process finds the server (as executors would)."""
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return s3


@pytest.fixture(params=["posix", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A staging log's location on each store (the query's log directory in it)."""
    if request.param == "posix":
        return str(tmp_path / "staging" / "q")
    server: S3Server = request.getfixturevalue("s3_env")
    return f"s3://{server.new_bucket()}/ck/nsq_staging/q"


def files(root: str) -> set[str]:
    """Every file under `root`, relative to it (POSIX: empty directories do not count)."""
    if root.startswith("s3://"):
        bucket, _, prefix = root[len("s3://") :].partition("/")
        import boto3

        keys = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix + "/")
        return {item["Key"][len(prefix) + 1 :] for item in keys.get("Contents", [])}
    return {
        os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names
    }


def rows(nsqd: str, ids: list[str]) -> Any:
    """A staged task's rows (the columns the staging log looks at)."""
    n = len(ids)
    return pa.record_batch(
        [pa.array([i.encode() for i in ids]), pa.array(ids), pa.array([nsqd] * n)],
        names=["body", "id", "nsqd"],
    )


def ids(table: Any) -> list[str]:
    return list(table["id"].to_pylist())


def test_the_log_behaves_the_same_on_both_stores(root: str) -> None:
    log = StagingLog(root)
    assert log.read(1, 0) is None
    assert log.unconfirmed_ids("n1") == set()
    log.commit(5)  # nothing staged yet: nothing to do

    assert log.write(1, 0, rows("n1", ["a0", "a1"]))
    # A second attempt of the task loses the claim and changes nothing.
    assert not log.write(1, 0, rows("n1", ["x0"]))
    assert ids(log.read(1, 0)) == ["a0", "a1"]
    assert log.write(1, 1, rows("n2", ["c0"]))
    log.confirm(1, 1)
    assert log.write(2, 0, rows("n1", ["b0"]))
    assert files(root) == {"b1/p0.arrow", "b1/p1.arrow", "b1/p1.fin", "b2/p0.arrow"}
    # Files without a .fin marker are unconfirmed; only the nsqd's own ids count.
    assert log.unconfirmed_ids("n1") == {"a0", "a1", "b0"}
    assert log.unconfirmed_ids("n2") == set()

    log.commit(1)
    # Batch 1's confirmed file is gone, its unconfirmed one kept, its tombstone written;
    # batch 2 is untouched.
    assert files(root) == {"unconfirmed/b1-p0.arrow", "b1/committed", "b2/p0.arrow"}
    assert log.committed(1) and not log.committed(2)
    assert log.read(1, 0) is None and log.read(1, 1) is None
    assert ids(log.read(2, 0)) == ["b0"]
    assert log.unconfirmed_ids("n1") == {"a0", "a1", "b0"}

    log.confirm(2, 0)
    log.commit(2)
    assert files(root) == {"unconfirmed/b1-p0.arrow", "b1/committed", "b2/committed"}
    assert log.unconfirmed_ids("n1") == {"a0", "a1"}

    # A straggler's claim beside a tombstone is not counted as staged, and the next commit
    # deletes it; tombstones go after 100 batches.
    assert log.write(2, 1, rows("n1", ["late"]))
    assert log.unconfirmed_ids("n1") == {"a0", "a1"}
    log.commit(3)
    assert files(root) == {"unconfirmed/b1-p0.arrow", "b1/committed", "b2/committed"}
    log.commit(101)
    assert files(root) == {"unconfirmed/b1-p0.arrow", "b2/committed"}
    if not root.startswith("s3://"):
        assert sorted(os.listdir(root)) == ["b2", "unconfirmed"]  # b1's directory removed


def test_a_file_committed_while_it_is_listed_is_found_where_it_was_moved(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor lists the log, then the driver commits the batch (moving its unconfirmed
    file) before the executor reads it: the ids are read from ``unconfirmed/``."""
    log = StagingLog(root)
    assert log.write(3, 0, rows("n1", ["m0", "m1"]))
    before = log.store.listing()
    log.commit(3)
    monkeypatch.setattr(log.store, "listing", lambda: before)
    assert log.unconfirmed_ids("n1") == {"m0", "m1"}


def test_s3_log_stages_with_one_conditional_put_per_claim(s3_env: S3Server) -> None:
    bucket = s3_env.new_bucket()
    log = StagingLog(f"s3://{bucket}/prefix/q")
    start = len(s3_env.requests)
    assert log.write(4, 2, rows("n1", ["a"]))
    assert not log.write(4, 2, rows("n1", ["b"]))
    log.confirm(4, 2)
    path = f"/{bucket}/prefix/q/b4/p2"
    assert put_requests(s3_env.requests[start:]) == [
        (f"{path}.arrow", "*"),  # the claim
        (f"{path}.arrow", "*"),  # the losing claim (412): nothing written
        (f"{path}.fin", None),
    ]
    assert s3_env.keys(bucket) == ["prefix/q/b4/p2.arrow", "prefix/q/b4/p2.fin"]


def test_s3_listing_and_commit_take_several_pages(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListObjectsV2 answers a page of keys at a time (1000 at most) and DeleteObjects takes
    1000 at most: with pages of 4, a log of 11 objects is listed and committed whole."""
    monkeypatch.setattr(stores, "_PAGE", 4)
    bucket = s3_env.new_bucket()
    client = s3_env.client()
    for i in range(10):
        client.put_object(Bucket=bucket, Key=f"q/b1/p{i}.fin", Body=b"")
    client.put_object(Bucket=bucket, Key="q/b2/p0.fin", Body=b"")
    log = StagingLog(f"s3://{bucket}/q")
    start = len(s3_env.requests)
    assert log.store.listing() == {"b1": {f"p{i}.fin" for i in range(10)}, "b2": {"p0.fin"}}
    assert len(s3_env.requests) - start == 3  # 11 keys, 4 a page
    start = len(s3_env.requests)
    log.commit(1)
    deletes = [r for r in s3_env.requests[start:] if r[0] == "POST"]
    assert len(deletes) == 3  # 10 keys, 4 a request
    assert s3_env.keys(bucket) == ["q/b1/committed", "q/b2/p0.fin"]


def test_moto_refuses_a_second_conditional_put(s3: S3Server) -> None:
    """What the S3 store relies on, against the test server itself: a PutObject with
    ``If-None-Match: *`` of an existing key fails with 412 and leaves the object as it was
    (a plain PutObject overwrites)."""
    bucket, client = s3.new_bucket(), s3.client()
    client.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as raised:
        client.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert raised.value.response["Error"]["Code"] == "PreconditionFailed"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"
    client.put_object(Bucket=bucket, Key="k", Body=b"third")
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"third"


def test_s3a_names_the_same_bucket_and_keys(s3_env: S3Server) -> None:
    bucket = s3_env.new_bucket()
    assert StagingLog(f"s3a://{bucket}/p/q").write(1, 0, rows("n1", ["a"]))
    assert ids(StagingLog(f"s3://{bucket}//p/q/").read(1, 0)) == ["a"]
    assert s3_env.keys(bucket) == ["p/q/b1/p0.arrow"]


class _Client:
    """A boto3 client whose put_object is `put` (everything else passes through)."""

    def __init__(self, client: Any, put: Any) -> None:
        self._client = client
        self.put_object = put

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _error(status: int, code: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )


def test_s3_claim_answered_412_for_its_own_retried_put_is_won(s3_env: S3Server) -> None:
    """botocore retries a PUT whose response was lost (a timeout): the retry is answered 412
    although the object is this claim's. The claim is won, not lost."""
    log = StagingLog(f"s3://{s3_env.new_bucket()}/q")
    client = log.store.client  # type: ignore[attr-defined]

    def put_twice(**kwargs: Any) -> Any:
        client.put_object(**kwargs)  # stored; its response lost
        return client.put_object(**kwargs)  # botocore's retry: 412

    log.store._client = _Client(client, put_twice)  # type: ignore[attr-defined]
    assert log.write(1, 0, rows("n1", ["mine"]))
    log.store._client = client  # type: ignore[attr-defined]
    # And a claim another attempt made stays lost.
    assert not log.write(1, 0, rows("n1", ["other"]))
    assert ids(log.read(1, 0)) == ["mine"]


def test_s3_claim_answered_409_is_tried_again(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """409 ConditionalRequestConflict: another conditional write of the key was in progress.
    The claim is tried again: won if that write failed, lost (412) if it succeeded."""
    monkeypatch.setattr(stores.time, "sleep", lambda _: None)
    log = StagingLog(f"s3://{s3_env.new_bucket()}/q")
    client = log.store.client  # type: ignore[attr-defined]
    answers: list[Any] = []

    def put(**kwargs: Any) -> Any:
        if answers:
            raise answers.pop(0)
        return client.put_object(**kwargs)

    log.store._client = _Client(client, put)  # type: ignore[attr-defined]
    answers[:] = [_error(409, "ConditionalRequestConflict")] * 2
    assert log.write(1, 0, rows("n1", ["a"]))
    answers[:] = [_error(409, "ConditionalRequestConflict")]
    assert not log.write(1, 0, rows("n1", ["b"]))  # the retry is answered 412
    answers[:] = [_error(409, "ConditionalRequestConflict")] * (stores._CONFLICT_RETRIES + 1)
    with pytest.raises(ClientError):
        log.write(2, 0, rows("n1", ["c"]))
    answers[:] = [_error(403, "AccessDenied")]
    with pytest.raises(ClientError):
        log.write(3, 0, rows("n1", ["d"]))
    assert ids(log.read(1, 0)) == ["a"]
    assert log.read(2, 0) is None and log.read(3, 0) is None


def test_an_s3_log_pickles_without_its_client(s3_env: S3Server) -> None:
    log = StagingLog(f"s3://{s3_env.new_bucket()}/q")
    assert log.write(1, 0, rows("n1", ["a"]))
    copy = pickle.loads(pickle.dumps(log))
    assert copy.store._client is None
    assert ids(copy.read(1, 0)) == ["a"]


def test_without_boto3_an_s3_log_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'trionsq\[spark-s3\]'"):
        StagingLog("s3://bucket/q").read(1, 0)


_RACER = """
import json, sys
import pyarrow as pa
from trionsq.spark.staging import StagingLog

root, me = sys.argv[1], sys.argv[2]
log = StagingLog(root)
log.read(0, 0)  # S3: the client made and connected before the race
print("ready", flush=True)
for line in sys.stdin:
    batch = int(line)
    ids = [f"{me}-{batch}-{i}" for i in range(3)]
    rows = pa.record_batch(
        [pa.array([i.encode() for i in ids]), pa.array(ids), pa.array(["n"] * 3)],
        names=["body", "id", "nsqd"],
    )
    won = log.write(batch, 0, rows)
    print(json.dumps({"won": won, "ids": log.read(batch, 0)["id"].to_pylist()}), flush=True)
"""


def test_two_executor_processes_race_to_stage_one_task(root: str, tmp_path: Any) -> None:
    """Two processes sharing nothing but the store (each its own client) stage the same
    (batch, partition) at once, round after round: exactly one wins each claim, and both
    read the winner's rows."""
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    env = pythonpath_env()  # with the S3 endpoint and credentials when root is on S3
    names = ("x", "y")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), root, name],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    answers_of = []
    for proc, name in zip(procs, names, strict=True):
        assert proc.stdout is not None
        answers_of.append(ChildLines(proc.stdout, f"racer {name}"))
    try:
        for lines in answers_of:
            assert lines.next(timeout=120) == "ready\n"
        wins = {"x": 0, "y": 0}
        for batch in range(1, 31):
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"{batch}\n")
                proc.stdin.flush()
            answers = []
            for lines in answers_of:
                line = lines.next(timeout=120)
                assert line, "a racer died"
                answers.append(json.loads(line))
            assert [a["won"] for a in answers].count(True) == 1, answers
            winner = "x" if answers[0]["won"] else "y"
            wins[winner] += 1
            expected = [f"{winner}-{batch}-{i}" for i in range(3)]
            assert [a["ids"] for a in answers] == [expected, expected]
        assert sum(wins.values()) == 30
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    assert [proc.returncode for proc in procs] == [0, 0]
