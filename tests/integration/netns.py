"""Running a program in a network namespace of its own (`unshare -n`): there NSQ's default ports
are free whatever the host runs, and nothing it binds is seen outside. Shared by the tests that
start daemons on fixed addresses (test_default_ports, test_deploy)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest


def unshare_net() -> list[str]:
    """The command prefix that runs a program in a network namespace of its own, or a skip."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) (util-linux) on this machine")
    candidates = [["unshare", "-n"], ["unshare", "-r", "-n"]]  # as root; else as a user
    if os.geteuid() != 0:
        candidates.reverse()
    for prefix in candidates:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return prefix
    pytest.skip("network namespaces are not permitted here (unshare -n fails)")


def run_in_netns(
    argv: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` in a namespace of its own; whatever it started is killed with it (its
    process group) when it ends or times out."""
    prefix = unshare_net()
    proc = subprocess.Popen(
        [*prefix, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
