"""The Quick start commands' set-up (`scripts/setup-venv`): `./run` installs the package and its
runtime dependencies only, `./test` adds the test extras, each step says what it does, and an
up-to-date venv is left alone. Run on a copy of the scripts with a stand-in python that logs
what it is asked to do (nothing is installed, nothing is downloaded); `scripts/hold-ports`,
which .ci/run runs the tests under, is checked on ports of its own."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import trio

from trionsq.testing import free_ports

ROOT = Path(__file__).resolve().parents[2]

# Stands in for python3 and for everything in .venv/bin: logs its name and arguments; creates
# the venv when asked to; runs real Python for `-c` (setup-venv reads pyproject.toml so) and
# `--version`; as nsqd, waits for the other daemons ./run starts.
_FAKE = """#!/usr/bin/env bash
args="$*"
echo "$(basename "$0") ${args//$'\\n'/ }" >> "$FAKE_LOG"
if [ "${1-}" = -m ] && [ "${2-}" = venv ]; then
  mkdir -p "$3/bin"
  for tool in python trionsq ruff mypy; do cp "$0" "$3/bin/$tool"; done
elif [ "${1-}" = -c ] || [ "${1-}" = --version ]; then
  exec "$REAL_PYTHON" "$@"
elif [ "$(basename "$0")" = trionsq ] && [ "${1-}" = nsqd ]; then
  for _ in $(seq 200); do  # ./run's nsqd (in the foreground) outlives the other two
    grep -q "^trionsq nsqlookupd" "$FAKE_LOG" && grep -q "^trionsq nsqadmin" "$FAKE_LOG" && break
    sleep 0.05
  done
fi
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The Quick start's files in a fresh directory, as in a clone."""
    root = tmp_path / "trionsq"
    for name in ["run", "test", "scripts/setup-venv", "pyproject.toml", "setup.py"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    for name in [
        "trionsq/protocol/_speedups.c",
        "trionsq/protocol/crc32c_impl.h",
        "trionsq/nsqd/replication/_log_loops.c",
    ]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    fake = tmp_path / "bin/python3"
    fake.parent.mkdir()
    fake.write_text(_FAKE)
    fake.chmod(0o755)
    return root


def _run(checkout: Path, command: str) -> tuple[list[str], list[str]]:
    """Run `command` in `checkout`: the commands the stand-ins were given, and the lines the
    scripts printed."""
    log = checkout.parent / "log"
    log.write_text("")
    env = {
        **os.environ,
        "PYTHON": str(checkout.parent / "bin/python3"),
        "FAKE_LOG": str(log),
        "REAL_PYTHON": sys.executable,
    }
    result = subprocess.run(
        [command], cwd=checkout, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines(), result.stderr.splitlines()


def _test_extras() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras: list[str] = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    return extras


def test_run_installs_only_the_runtime_and_says_so(checkout: Path) -> None:
    commands, said = _run(checkout, "./run")
    python = str(checkout.parent / "bin/python3")
    assert commands[:4] == [
        "python3 --version",
        "python3 -m venv .venv",
        "python -m pip install -e .",
        "python -m compileall -q trionsq",
    ]
    assert not any("test" in c or "pytest" in c for c in commands), commands
    daemons = sorted(c.split()[:2] for c in commands[4:])  # started together
    assert daemons == [["trionsq", "nsqadmin"], ["trionsq", "nsqd"], ["trionsq", "nsqlookupd"]]
    steps = [line for line in said if line.startswith(("setup-venv: ", "run: "))]
    assert [line.split(" (")[0] for line in steps] == [
        "setup-venv: creating .venv",
        "setup-venv: installing trionsq and its runtime dependencies",
        "setup-venv: compiling trionsq's bytecode",
        "setup-venv: runtime ready",
        "run: starting nsqlookupd",
    ], said
    assert f"(Python {sys.version.split()[0]}, {python} -m venv)" in steps[0]

    # Up to date: straight to the daemons.
    commands, said = _run(checkout, "./run")
    assert [c.split()[0] for c in commands] == ["trionsq"] * 3
    assert not any(line.startswith("setup-venv: ") for line in said)


def test_test_adds_the_test_extras_once(checkout: Path) -> None:
    _run(checkout, "./run")
    commands, said = _run(checkout, "./test")
    extras = _test_extras()
    assert commands[0].startswith("python -c ") and "tomllib" in commands[0]  # the extras
    assert commands[1] == "python -m pip install " + " ".join(extras)
    assert [c.split()[0] for c in commands[2:]] == ["ruff", "ruff", "mypy", "python"]
    assert commands[-1] == "python -m pytest -q"
    assert [line.split(" (")[0] for line in said if line.startswith("setup-venv: ")] == [
        "setup-venv: installing the test extras",
        "setup-venv: test extras ready",
    ]

    commands, said = _run(checkout, "./test")
    assert not any(" pip " in c for c in commands)
    assert not any(line.startswith("setup-venv: ") for line in said)

    # A changed pyproject.toml: both levels again.
    before = time.time() - 10
    for stamp in (checkout / ".venv").glob(".trionsq-*"):
        os.utime(stamp, (before, before))
    (checkout / "pyproject.toml").touch()
    commands, _ = _run(checkout, "./test")
    installs = [c for c in commands if " pip install " in c]
    assert installs == [
        "python -m pip install -e .",
        "python -m pip install " + " ".join(extras),
    ]


def test_hold_ports_makes_every_bind_of_its_ports_fail(tmp_path: Path) -> None:
    """What .ci/run relies on: while `scripts/hold-ports` runs, a daemon's bind of a held port
    fails, with SO_REUSEADDR (trio's) and on any address; connections are reported."""
    ports = free_ports(2)
    ready = tmp_path / "ready"
    holder = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts/hold-ports"), f"--ready-file={ready}"]
        + [str(p) for p in ports],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 15
        while not ready.exists():
            assert holder.poll() is None, holder.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for port in ports:
            for host in ["127.0.0.1", "0.0.0.0", "127.0.0.2"]:
                with pytest.raises(OSError, match="Address already in use"):
                    trio.run(functools.partial(trio.open_tcp_listeners, port, host=host))
            with pytest.raises(OSError, match="Address already in use"):
                trio.run(trio.open_tcp_listeners, port)  # any address, IPv4 and IPv6
        socket.create_connection(("127.0.0.1", ports[0]), timeout=5).close()
    finally:
        holder.terminate()
        _, err = holder.communicate(timeout=15)
    assert holder.returncode == 0, err
    assert f"holding {ports[0]} {ports[1]} " in err
    assert f"a connection to port {ports[0]} from 127.0.0.1:" in err
