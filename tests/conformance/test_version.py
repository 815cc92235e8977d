"""``--version`` of every NSQ program, one line on stdout, exit 0: the daemons print
``NAME vX.Y.Z (built w/TOKEN)`` and the bundled apps ``NAME vX.Y.Z``. The test harnesses of NSQ
client libraries parse the daemons' line with TOKEN matching ``[a-z0-9.-]+`` (Go prints
``nsqd v1.3.0 (built w/go1.19.8)``) and cannot start a daemon whose line does not match.

    pytest tests/conformance/test_version.py                          # trionsq's commands
    pytest tests/conformance/test_version.py --nsq-bin-dir=/path/bin  # Go's binaries
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

DAEMON_LINE = re.compile(r"(?P<name>[a-z_]+) v\d+\.\d+\.\d+ \(built w/[a-z0-9.-]+\)")
APP_LINE = re.compile(r"(?P<name>[a-z_]+) v\d+\.\d+\.\d+")

DAEMONS = ["nsqd", "nsqlookupd", "nsqadmin"]
#: Go's to_nsq has no -version flag; trionsq's has (checked only against trionsq).
APPS = ["nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "nsq_stat", "to_nsq"]


def _bin_dir(config: pytest.Config) -> str | None:
    return config.getoption("nsq_bin_dir", default=None) or os.environ.get("NSQ_BIN_DIR")


def _version_line(config: pytest.Config, program: str, flag: str) -> str:
    bin_dir = _bin_dir(config)
    if bin_dir:
        command = [os.path.join(bin_dir, program)]
    else:
        command = [sys.executable, "-m", "trionsq", program]
    proc = subprocess.run([*command, flag], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    return lines[0]


@pytest.mark.parametrize("flag", ["--version", "-version"])
@pytest.mark.parametrize("program", DAEMONS)
def test_daemon_version_line(pytestconfig: pytest.Config, program: str, flag: str) -> None:
    match = DAEMON_LINE.fullmatch(_version_line(pytestconfig, program, flag))
    assert match is not None and match["name"] == program


@pytest.mark.parametrize("flag", ["--version", "-version"])
@pytest.mark.parametrize("program", APPS)
def test_app_version_line(pytestconfig: pytest.Config, program: str, flag: str) -> None:
    if program == "to_nsq" and _bin_dir(pytestconfig):
        pytest.skip("Go's to_nsq has no -version flag")
    match = APP_LINE.fullmatch(_version_line(pytestconfig, program, flag))
    assert match is not None and match["name"] == program
