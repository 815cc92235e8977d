"""trionsq installed as a user does (the `installed` fixture: sdist, wheel, fresh venv without the
test extras, `wheel.install_wheel`): a publish and a consume through the installed commands
under NSQ's names (`nsqd`, `to_nsq`, `nsq_tail`), and every NSQ-named command answering as
`trionsq <name>`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.wheel import run_ok
from trionsq.scripts import NSQ_COMMANDS
from trionsq.testing import DaemonProcess


def test_the_wheel_installs_no_test_extras(installed: Path) -> None:
    probe = (
        "import importlib.util as u; "
        "print([m for m in ('pytest', 'pyspark', 'hypothesis') if u.find_spec(m)])"
    )
    assert run_ok([str(installed / "python"), "-c", probe]).stdout.strip() == "[]"


@pytest.mark.parametrize("name", NSQ_COMMANDS)
def test_each_nsq_command_is_trionsq_under_that_name(installed: Path, name: str) -> None:
    for flag in ("--help", "--version"):
        by_name = subprocess.run(
            [str(installed / name), flag], capture_output=True, text=True, timeout=60
        )
        by_trionsq = subprocess.run(
            [str(installed / "trionsq"), name, flag], capture_output=True, text=True, timeout=60
        )
        assert by_name.stdout + by_name.stderr, f"{name} {flag} printed nothing"
        assert (by_name.returncode, by_name.stdout, by_name.stderr) == (
            by_trionsq.returncode,
            by_trionsq.stdout,
            by_trionsq.stderr,
        )


def test_publish_and_consume_through_the_installed_commands(installed: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with DaemonProcess("nsqd", executable=str(installed / "nsqd"), env=clean) as nsqd:
        address = "{}:{}".format(*nsqd.tcp_address)
        lines = [f"message {i}" for i in range(5)]
        run_ok(
            [str(installed / "to_nsq"), "--topic=installed", f"--nsqd-tcp-address={address}"],
            input="\n".join(lines) + "\n",
            env=clean,
        )
        tail = run_ok(
            [
                str(installed / "nsq_tail"),
                "--topic=installed",
                f"--nsqd-tcp-address={address}",
                f"-n={len(lines)}",
            ],
            env=clean,
        )
        assert tail.stdout.splitlines() == lines
        # The daemon is the installed one, not this checkout's.
        assert nsqd.argv[0] == str(installed / "nsqd")
