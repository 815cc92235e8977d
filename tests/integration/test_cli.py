"""The `trionsq` command as a subprocess: versions, one-line errors and exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trionsq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_nsqd_version() -> None:
    proc = _run("nsqd", "--version")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"nsqd v1\.3\.0 \(built w/trionsq-[a-z0-9.-]+\)", lines[0])
    assert proc.stderr == ""


def test_nsqd_single_dash_version() -> None:
    proc = _run("nsqd", "-version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("nsqd v1.3.0 (built w/trionsq-")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--no-such-flag"], "trionsq nsqd: flag provided but not defined: -no-such-flag"),
        (
            ["--mem-queue-size=abc"],
            'trionsq nsqd: invalid value "abc" for flag -mem-queue-size: parse error',
        ),
        (
            ["--msg-timeout", "60"],
            'trionsq nsqd: invalid value "60" for flag -msg-timeout: parse error',
        ),
        (["--tcp-address"], "trionsq nsqd: flag needs an argument: -tcp-address"),
    ],
)
def test_nsqd_flag_errors_are_one_line_exit_2(args: list[str], line: str) -> None:
    proc = _run("nsqd", *args)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [line]
    assert proc.stdout == ""


def test_nsqd_bad_config_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "nsqd.toml"
    cfg.write_text('msg_timeout = "forever"\n')
    proc = _run("nsqd", "--config", str(cfg))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("trionsq nsqd: ")
    assert "msg_timeout" in lines[0]


def test_nsqd_missing_config_is_one_line(tmp_path: Path) -> None:
    proc = _run("nsqd", "--config", str(tmp_path / "missing.toml"))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert "failed to load config file" in lines[0]


def test_nsqd_validation_error_is_one_line_exit_1() -> None:
    proc = _run("nsqd", "--max-deflate-level=12")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["trionsq nsqd: --max-deflate-level must be [1,9]"]


def test_nsqd_tls_required_without_cert() -> None:
    proc = _run("nsqd", "--tls-required")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "trionsq nsqd: cannot require TLS client connections without TLS key and cert"
    ]


def test_nsqd_help_exits_0() -> None:
    proc = _run("nsqd", "--help")
    assert proc.returncode == 0
    assert proc.stderr.startswith("Usage of nsqd:\n")
    assert "-lookupd-tcp-address value" in proc.stderr


def test_unknown_command() -> None:
    proc = _run("frobnicate")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert "frobnicate" in lines[0]


def test_no_command_prints_usage_exit_2() -> None:
    proc = _run()
    assert proc.returncode == 2
    assert "nsqd" in proc.stderr


def test_help_exit_0() -> None:
    proc = _run("--help")
    assert proc.returncode == 0
    assert "nsqd" in proc.stdout
    assert "bench" in proc.stdout
