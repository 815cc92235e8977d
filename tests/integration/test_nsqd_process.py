"""`trionsq nsqd` as a process: SIGTERM under load, restart on the same port, the data-path
lock, a unix socket address, and a TLS certificate that cannot be loaded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.child_lines import ChildLines
from trionsq.protocol import MAGIC_V2, FrameDecoder, fin, mpub, rdy, sub
from trionsq.testing import DaemonProcess


def _publish_until(stop: threading.Event, address: tuple[str, int], sent: list[int]) -> None:
    try:
        with socket.create_connection(address, timeout=5) as sock:
            sock.sendall(MAGIC_V2)
            command = mpub("load", [b"m" * 100] * 50)
            while not stop.is_set():
                sock.sendall(command)
                if not sock.recv(64):
                    return
                sent[0] += 50
    except OSError:
        pass  # the daemon went away mid-publish: expected at shutdown


def _consume_until(stop: threading.Event, address: tuple[str, int], got: list[int]) -> None:
    try:
        with socket.create_connection(address, timeout=5) as sock:
            sock.sendall(MAGIC_V2 + sub("load", "c") + rdy(500))
            decoder = FrameDecoder()
            while not stop.is_set():
                data = sock.recv(65536)
                if not data:
                    return
                decoder.feed(data)
                fins = [fin(d[10:26]) for t, d in decoder.frames() if t == 2]
                got[0] += len(fins)
                if fins:
                    sock.sendall(b"".join(fins))
    except OSError:
        pass


def _children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def test_sigterm_under_load_exits_zero_and_leaves_nothing_running():
    with DaemonProcess("nsqd") as nsqd:
        stop = threading.Event()
        sent, got = [0], [0]
        threads = [
            threading.Thread(target=_publish_until, args=(stop, nsqd.tcp_address, sent)),
            threading.Thread(target=_publish_until, args=(stop, nsqd.tcp_address, sent)),
            threading.Thread(target=_consume_until, args=(stop, nsqd.tcp_address, got)),
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while (sent[0] < 20_000 or got[0] < 5_000) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sent[0] >= 20_000 and got[0] >= 5_000, "load was running"
        pid = nsqd.proc.pid
        assert _children_of(pid) == []
        assert nsqd.terminate(timeout=20) == 0
        stop.set()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        log = "".join(nsqd.stderr_lines)
        assert "received SIGTERM" in log and "bye" in log
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_sigint_also_shuts_down_cleanly():
    with DaemonProcess("nsqd") as nsqd:
        nsqd.proc.send_signal(signal.SIGINT)
        assert nsqd.proc.wait(20) == 0


def test_restart_on_the_same_port_right_after_a_kill(tmp_path):
    with DaemonProcess("nsqd", data_path=str(tmp_path)) as first:
        host, port = first.tcp_address
        # a connected client leaves the port in TIME_WAIT/ESTABLISHED after the kill
        client = socket.create_connection((host, port))
        client.sendall(MAGIC_V2)
        first.proc.kill()
        first.proc.wait()
    client.close()
    with DaemonProcess(
        "nsqd", args=[f"--tcp-address={host}:{port}"], data_path=str(tmp_path)
    ) as second:
        assert second.tcp_address == (host, port)


def test_a_second_nsqd_on_the_same_data_path_refuses_to_start(tmp_path):
    with DaemonProcess("nsqd", data_path=str(tmp_path)):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "trionsq",
                "nsqd",
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                f"--data-path={tmp_path}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert "failed to lock data-path" in result.stderr
    assert "Traceback" not in result.stderr


def test_listens_on_a_unix_socket_path(tmp_path):
    path = str(tmp_path / "nsqd.sock")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trionsq",
            "nsqd",
            f"--tcp-address={path}",
            "--http-address=127.0.0.1:0",  # not NSQ's 0.0.0.0:4151 (a local cluster may hold it)
            f"--data-path={tmp_path}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 15
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            sock.sendall(MAGIC_V2 + mpub("t", [b"a"]))
            assert sock.recv(64) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def test_data_path_defaults_to_the_working_directory(tmp_path):
    # Every listener on 127.0.0.1 port 0: only the data path is left to its default.
    addresses = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trionsq", "nsqd", *addresses],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        # After the start-up lines (version, ID), as Go nsqd logs them.
        lines = ChildLines(proc.stderr, "nsqd").until(lambda line: "TCP: listening" in line, 60)
        assert len(lines) <= 3, lines
        assert "TCP: listening on 127.0.0.1:" in lines[-1], lines
        # The working directory is the locked data path: a second nsqd there refuses.
        second = subprocess.run(
            [sys.executable, "-m", "trionsq", "nsqd", *addresses],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 1 and "failed to lock data-path" in second.stderr
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.parametrize(
    "flags", [["--tls-cert=/x.pem"], ["--tls-cert=/x.pem", "--tls-key=/x.pem"]]
)
def test_unusable_tls_certificate_stops_nsqd_with_one_line(flags, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trionsq",
            "nsqd",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--https-address=127.0.0.1:0",
            f"--data-path={tmp_path}",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    # Go's start-up lines (version, ID), then the one line that says why it stops.
    lines = result.stderr.strip().splitlines()
    assert "failed to build TLS config - " in lines[-1] and "FATAL" in lines[-1], lines
    assert [line for line in lines if "INFO" not in line] == lines[-1:], lines
