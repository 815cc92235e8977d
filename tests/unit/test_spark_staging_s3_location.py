"""The S3 staging location, checked when the query starts: ``s3://bucket/prefix`` and
``s3a://`` are served, a location without a bucket and other schemes are refused naming the
option; the one local-path helper; the archive job's staging location (an explicit
``stagingLocation`` wins over ``<checkpoint>/nsq_staging``, an S3 checkpoint needs one)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pytest

from trionsq.spark import cli, pipeline
from trionsq.spark.options import (
    OptionError,
    SourceOptions,
    find_option,
    local_path,
    s3_parts,
    staging_location,
)

BASE = {"topic": "t", "channel": "c", "nsqd": "127.0.0.1:4150"}


@pytest.mark.parametrize(
    "value", ["s3://bucket/ck/nsq_staging", "s3a://bucket/ck", "s3://bucket", "S3://bucket/x/"]
)
def test_s3_is_served(value: str) -> None:
    pytest.importorskip("boto3")
    assert staging_location(value) == value
    assert SourceOptions.parse({**BASE, "stagingLocation": value}).staging_location == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("hdfs://namenode:8020/ck/nsq_staging", "is on hdfs: storage"),
        ("gs://bucket/ck", "is on gs: storage"),
        ("abfs://container@account.dfs.core.windows.net/ck", "is on abfs: storage"),
        ("s3://", "names no bucket"),
        ("s3:///ck", "names no bucket"),
        ("s3a:bucket/ck", "names no bucket"),
        ("s3://key:secret@bucket/ck", "is not s3://bucket/prefix"),
        ("s3://bucket/ck?versionId=1", "is not s3://bucket/prefix"),
        ("staging", "is a relative path"),
    ],
)
def test_what_is_still_refused_and_why(value: str, why: str) -> None:
    with pytest.raises(OptionError) as raised:
        SourceOptions.parse({**BASE, "stagingLocation": value})
    message = str(raised.value)
    assert message.startswith(f"option stagingLocation: {value!r} ")
    assert why in message and "\n" not in message
    if "storage" in why:
        assert "s3://bucket/prefix" in message  # what is served


def test_without_boto3_s3_is_refused_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(OptionError, match=r"pip install 'trionsq\[spark-s3\]'"):
        staging_location("s3://bucket/ck")


def test_s3_parts() -> None:
    assert s3_parts("s3://bucket/a/b") == ("bucket", "a/b")
    assert s3_parts("s3a://bucket//a/b/") == ("bucket", "a/b")
    assert s3_parts("s3://bucket") == ("bucket", "")
    assert s3_parts(os.path.join("s3://bucket/ck", "log")) == ("bucket", "ck/log")


def test_local_path() -> None:
    assert local_path("/shared/ck") == "/shared/ck"
    assert local_path("rel/ck") == "rel/ck"
    assert local_path("file:///shared/ck") == "/shared/ck"
    assert local_path("file:/shared/ck") == "/shared/ck"
    assert local_path("FILE:///shared/ck") == "/shared/ck"
    for url in ("s3://b/ck", "s3a://b/ck", "hdfs://nn/ck", "gs://b/ck"):
        assert local_path(url) is None


def test_find_option_is_case_insensitive() -> None:
    assert find_option({"staginglocation": "x"}, "stagingLocation") == "x"
    assert find_option({"STAGINGLOCATION": ""}, "stagingLocation") == ""
    assert find_option({"topic": "t"}, "stagingLocation") is None


def test_checkpoint_staging() -> None:
    assert pipeline.checkpoint_staging("/ck/") == "/ck/nsq_staging"
    assert pipeline.checkpoint_staging("rel/ck") == os.path.abspath("rel/ck") + "/nsq_staging"
    assert pipeline.checkpoint_staging("file:///ck") == "file:///ck/nsq_staging"
    for checkpoint, why in [
        ("s3://bucket/ck", "is on s3: storage, where the archive does not stage by itself"),
        ("s3a://bucket/ck", "is on s3a: storage, where the archive does not stage by itself"),
        ("hdfs://nn/ck", "is on hdfs: storage, which the staged source cannot use"),
        ("file:rel/ck", "is a relative path"),
    ]:
        with pytest.raises(OptionError) as raised:
            pipeline.checkpoint_staging(checkpoint)
        message = str(raised.value)
        assert message.startswith(f"checkpoint: {checkpoint!r} {why}")
        assert "stagingLocation" in message and "staged=False" in message


def archive(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = cli.main(
        ["archive", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1", "--output", *flags]
    )
    return code, capsys.readouterr().err.splitlines()[0]


def test_the_archive_cli_refuses_an_s3_checkpoint_without_a_staging_location(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = archive(capsys, "/out", "--checkpoint", "s3://bucket/ck")
    assert code == 2
    assert line.startswith(
        "trionsq spark archive: --checkpoint: 's3://bucket/ck' is on s3: storage, where the "
        "archive does not stage by itself"
    )
    assert "stagingLocation=/mnt/shared" in line and "s3://bucket/prefix" in line
    assert "--driver-reader" in line
    code, line = archive(capsys, "s3a://bucket/out")
    assert code == 2 and "--checkpoint: 's3a://bucket/out/_checkpoint' is on s3a:" in line
    code, line = archive(capsys, "/out", "--source-opt", "stagingLocation=s3://")
    assert code == 2
    assert line.startswith("trionsq spark archive: --source-opt stagingLocation: 's3://' names")


def test_the_archive_cli_takes_an_s3_staging_location_with_any_checkpoint() -> None:
    pytest.importorskip("boto3")
    for checkpoint in ("s3a://bucket/ck", "hdfs://nn/ck", "/ck"):
        args = argparse.Namespace(checkpoint=checkpoint, output="/out")
        cli._check_staging(args, {"stagingLocation": "s3://bucket/staging"})
        cli._check_staging(args, {"staginglocation": "s3a://bucket/staging"})


class _Chain:
    """A stand-in SparkSession: every call returns itself; the options set are recorded."""

    def __init__(self) -> None:
        self.options: list[tuple[str, str]] = []

    def option(self, key: str, value: str) -> _Chain:
        self.options.append((key, value))
        return self

    def __getattr__(self, name: str) -> Any:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Chain:
        return self


def _archive_options(checkpoint: str, options: dict[str, str]) -> list[tuple[str, str]]:
    spark = _Chain()
    pipeline.archive(spark, topic="t", output="/out", checkpoint=checkpoint, options=options)
    return [(k, v) for k, v in spark.options if k.lower() == "staginglocation"]


def test_an_explicit_staging_location_wins_over_the_checkpoints() -> None:
    pytest.importorskip("pyspark")  # archive registers the data source
    assert _archive_options("/ck", {}) == [("stagingLocation", "/ck/nsq_staging")]
    assert _archive_options("/ck", {"stagingLocation": "s3://b/s"}) == [
        ("stagingLocation", "s3://b/s")
    ]
    assert _archive_options("s3a://b/ck", {"staginglocation": "s3://b/s"}) == [
        ("staginglocation", "s3://b/s")
    ]
    with pytest.raises(OptionError, match="'s3a://b/ck' is on s3a: storage"):
        _archive_options("s3a://b/ck", {})
