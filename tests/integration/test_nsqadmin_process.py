"""`trionsq nsqadmin` / `trionsq admin` as a subprocess: startup line, one-line errors and exit
codes, serving a real cluster, clean exit on SIGTERM and SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest

from trionsq.testing import DaemonProcess


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trionsq", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("command", ["nsqadmin", "admin"])
def test_version(command: str) -> None:
    proc = _run(command, "--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("nsqadmin v1.3.0 (built w/trionsq-")


def test_help_lists_go_flags() -> None:
    proc = _run("nsqadmin", "--help")
    assert proc.returncode == 0
    for flag in ("-lookupd-http-address", "-nsqd-http-address", "-admin-user", "-base-path"):
        assert flag in proc.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 1, "--nsqd-http-address or --lookupd-http-address required"),
        (
            ["--nsqd-http-address=a:1", "--lookupd-http-address=b:2"],
            1,
            "use --nsqd-http-address or --lookupd-http-address not both",
        ),
        (["--bogus"], 2, "flag provided but not defined: -bogus"),
    ],
)
def test_one_line_errors(args: list[str], code: int, message: str) -> None:
    proc = _run("nsqadmin", *args)
    assert proc.returncode == code
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0] == f"trionsq nsqadmin: {message}"


def test_listen_failure_exits_1() -> None:
    with DaemonProcess("nsqlookupd") as lookupd:
        host, port = lookupd.http_address or ("", 0)
        # the lookupd's HTTP port is taken
        proc = _run("nsqadmin", f"--http-address={host}:{port}", "--nsqd-http-address=a:1")
    assert proc.returncode == 1
    assert (
        f"FATAL: failed to instantiate nsqadmin - listen ({host}:{port}) failed - "
        f"listen tcp {host}:{port}: bind: address already in use\n"
    ) in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serves_cluster_and_exits_cleanly(signum: signal.Signals) -> None:
    with DaemonProcess("nsqlookupd") as lookupd:
        lh, lp = lookupd.http_address or ("", 0)
        with DaemonProcess("nsqadmin", [f"--lookupd-http-address={lh}:{lp}"]) as admin:
            host, port = admin.http_address or ("", 0)
            assert host == "127.0.0.1"
            base = f"http://{host}:{port}"
            assert httpx.get(f"{base}/ping").text == "OK"
            answer = httpx.get(f"{base}/api/topics").json()
            assert answer["message"] == "" and answer["errors"] == []
            page = httpx.get(f"{base}/")
            assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
            admin.proc.send_signal(signum)
            assert admin.proc.wait(20) == 0
            text = "".join(admin.stderr_lines)
            assert "[nsqadmin] " in text and "INFO: nsqadmin v1.3.0" in text
            assert f"HTTP: listening on {host}:{port}" in text
