"""The staged source's staging location, checked when the query starts (issue 32, part 1's
refusals; docs/spark.md): a relative path or a store the source cannot serve is an error
naming the option and why, never a directory made on each executor's own disk. The archive
job refuses a checkpoint it would stage in such a store before Spark starts."""

from __future__ import annotations

import pytest

from trionsq.spark import cli
from trionsq.spark.options import OptionError, SourceOptions, staging_location

BASE = {"topic": "t", "channel": "c", "nsqd": "127.0.0.1:4150"}


@pytest.mark.parametrize("value", ["", "/shared/ck/nsq_staging", "file:///shared/ck", "file:/x"])
def test_what_the_staged_source_can_use(value: str) -> None:
    assert staging_location(value) == value
    assert SourceOptions.parse({**BASE, "stagingLocation": value}).staging_location == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("hdfs://namenode:8020/ck/nsq_staging", "is on hdfs: storage"),
        ("abfs://c@account.dfs.core.windows.net/ck", "is on abfs: storage"),  # s3a: served
        ("gs://bucket/ck", "is on gs: storage"),
        ("staging", "is a relative path"),
        ("./ck/staging", "is a relative path"),
        ("file:relative/dir", "is a relative path"),
    ],
)
def test_what_it_refuses_and_why(value: str, why: str) -> None:
    with pytest.raises(OptionError) as raised:
        SourceOptions.parse({**BASE, "stagingLocation": value})
    message = str(raised.value)
    assert message.startswith(f"option stagingLocation: {value!r} ")
    assert why in message


def archive(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = cli.main(
        ["archive", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1", "--output", *flags]
    )
    return code, capsys.readouterr().err.splitlines()[0]


def test_the_archive_refuses_a_checkpoint_it_cannot_stage_in(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = archive(capsys, "/out", "--checkpoint", "hdfs://namenode:8020/ck")
    assert code == 2
    assert line.startswith("trionsq spark archive: --checkpoint: 'hdfs://namenode:8020/ck'")
    assert "stagingLocation=/mnt/shared" in line and "--driver-reader" in line
    code, line = archive(capsys, "s3a://bucket/out")
    assert code == 2 and "--checkpoint: 's3a://bucket/out/_checkpoint' is on s3a:" in line
    code, line = archive(capsys, "/out", "--source-opt", "stagingLocation=rel/dir")
    assert code == 2
    assert line.startswith("trionsq spark archive: --source-opt stagingLocation: 'rel/dir'")
