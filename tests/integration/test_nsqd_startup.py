"""nsqd's start-up as a program: its sockets listen before the daemon's modules are imported
(so a client that connects early is queued by the kernel and served, not refused), and a plain
nsqd never imports what only opt-in features use. How long start-up takes is a benchmark
(bench/startup.py), not a test."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from trionsq.protocol import MAGIC_V2, pub
from trionsq.testing import free_ports

#: Imported by the daemon proper; none of them before its sockets listen.
_DAEMON_MODULES = ("trio", "hypercorn", "quart", "httpx", "trionsq.nsqd.nsqd")
#: Imported only when an opt-in feature or route is used.
_OPT_IN_MODULES = (
    "httpx",
    "trionsq.nsqd.replication.node",
    "trionsq.nsqd.replication.topic",
    "trionsq.nsqd.replication.admin",
    "trionsq.nsqd.prometheus",
    "trionsq.nsqd.peek",
)


def connect_when_listening(port: int) -> socket.socket:
    """A connection to `port` at the first moment the kernel accepts one."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=30)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "nsqd never listened"
            time.sleep(0.001)


def test_nsqd_listens_before_it_imports_the_daemon(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import socket, sys
        from trionsq.nsqd.main import open_nsqd
        from trionsq.nsqd.options import parse_nsqd_args
        from trionsq.diskqueue.fs import LOCAL
        options = parse_nsqd_args(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                                   "--data-path={tmp_path}"])
        opened = open_nsqd(options, LOCAL, options.data_path)
        for sock in [*opened.tcp, opened.http]:
            socket.create_connection(sock.getsockname()[:2], timeout=5).close()
        print(" ".join(m for m in {_DAEMON_MODULES!r} if m in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def start_nsqd(
    data_path: Path,
    tcp_port: int,
    http_port: int,
    *python_flags: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """`trionsq nsqd` on these ports, its stderr piped."""
    return subprocess.Popen(
        [
            sys.executable,
            *python_flags,
            "-m",
            "trionsq",
            "nsqd",
            f"--tcp-address=127.0.0.1:{tcp_port}",
            f"--http-address=127.0.0.1:{http_port}",
            f"--data-path={data_path}",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_connection_made_while_nsqd_starts_is_served(tmp_path: Path) -> None:
    tcp_port, http_port = free_ports(2)
    proc = start_nsqd(tmp_path, tcp_port, http_port)
    try:
        with connect_when_listening(tcp_port) as sock:
            sock.sendall(MAGIC_V2 + pub("early", b"queued by the kernel"))
            assert sock.recv(64) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def test_a_plain_nsqd_imports_no_opt_in_feature(tmp_path: Path) -> None:
    """-X importtime names every module imported: after start-up, a publish, a delivery and
    the common HTTP routes, none of the opt-in features' modules is among them."""
    tcp_port, http_port = free_ports(2)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = start_nsqd(tmp_path, tcp_port, http_port, "-X", "importtime", env=env)
    try:
        with connect_when_listening(tcp_port) as sock:
            sock.sendall(MAGIC_V2 + pub("t", b"x") + b"SUB t c\nRDY 1\n")
            received = b""
            while b"x" not in received[20:]:
                chunk = sock.recv(4096)
                assert chunk
                received += chunk
        for path in ("/ping", "/stats?format=json", "/info"):
            with socket.create_connection(("127.0.0.1", http_port), timeout=30) as http:
                http.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
                assert http.recv(64).startswith(b"HTTP/1.1 200")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    imported = set(re.findall(r"^import time:.*\|\s*(\S+)\s*$", stderr, re.MULTILINE))
    assert "trionsq.nsqd.nsqd" in imported  # the log is what it should be
    assert sorted(imported.intersection(_OPT_IN_MODULES)) == []
