"""trionsq's test support: daemons as subprocesses on kernel-chosen ports, for tests and
benchmarks (this module), and the pytest plugin built on them (`trionsq.testing.pytest`:
``nsqd``, ``nsqlookupd`` and ``nsq_cluster`` fixtures for other projects; docs/testing.md).

The daemon logs ``TCP: listening on HOST:PORT`` (and ``HTTP: ...``, ``HTTPS: ...``) on stderr,
as Go nsqd and nsqlookupd do; `DaemonProcess` reads those lines to learn its addresses. Every
listener is on 127.0.0.1 port 0 unless the arguments say otherwise (never one of NSQ's default
ports: .ci/run holds them). nsqd gets a temporary data path, nsqlookupd
``--broadcast-address=127.0.0.1`` unless the arguments name one.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

_LISTEN = re.compile(r"\b(TCP|HTTP|HTTPS): listening on (\S+)")


class DaemonProcess:
    """A `trionsq <daemon>` subprocess. Use as a context manager; it is killed on exit."""

    def __init__(
        self,
        daemon: str = "nsqd",
        args: Sequence[str] = (),
        data_path: str | None = None,
        startup_timeout: float = 15.0,
        env: dict[str, str] | None = None,
        executable: str | None = None,
    ) -> None:
        """`executable`: a command that is `trionsq <daemon>` (an installed ``nsqd``, say)
        instead of this interpreter's ``python -m trionsq <daemon>``."""
        self.daemon = daemon
        self._own_dir: tempfile.TemporaryDirectory[str] | None = None
        if data_path is None and daemon == "nsqd":
            self._own_dir = tempfile.TemporaryDirectory(prefix="trionsq-nsqd-")
            data_path = self._own_dir.name
        argv = [executable] if executable else [sys.executable, "-m", "trionsq", daemon]
        if daemon == "nsqd":
            argv += [
                "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0",
                "--https-address=127.0.0.1:0",  # used only with --tls-cert and --tls-key
                f"--data-path={data_path}",
            ]
        elif daemon in ("nsqlookupd", "lookupd"):
            argv += ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
            if not any(_is_flag(arg, "broadcast-address") for arg in args):
                argv.append("--broadcast-address=127.0.0.1")
        elif daemon in ("nsqadmin", "admin"):
            argv.append("--http-address=127.0.0.1:0")
        argv += list(args)
        self.argv = argv
        self.data_path = data_path
        self.addresses: dict[str, str] = {}
        self.stderr_lines: list[str] = []
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + startup_timeout
        # nsqadmin has no TCP listener: its HTTP line says it is up. The others log TCP,
        # then HTTP when it is enabled; wait for both, however loaded the machine.
        ready = {"HTTP"} if daemon in ("nsqadmin", "admin") else {"TCP"}
        if _last_flag_value(argv, "http-address"):
            ready.add("HTTP")
        while not ready <= self.addresses.keys():
            if self.proc.poll() is not None:
                self._reader.join(1)
                raise RuntimeError(
                    f"{daemon} exited with {self.proc.returncode}:\n" + "".join(self.stderr_lines)
                )
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{daemon} did not start:\n" + "".join(self.stderr_lines))
            self._ready.wait(0.05)
            self._ready.clear()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)
            m = _LISTEN.search(line)
            if m:
                self.addresses.setdefault(m.group(1), m.group(2))
                self._ready.set()

    @property
    def tcp_address(self) -> tuple[str, int]:
        host, _, port = self.addresses["TCP"].rpartition(":")
        return host, int(port)

    @property
    def http_address(self) -> tuple[str, int] | None:
        if "HTTP" not in self.addresses:
            return None
        host, _, port = self.addresses["HTTP"].rpartition(":")
        return host, int(port)

    @property
    def https_address(self) -> tuple[str, int] | None:
        """The HTTPS listener's address (nsqd with a TLS certificate and key), waiting a few
        seconds for its log line; None if it never comes."""
        deadline = time.monotonic() + 5.0
        while "HTTPS" not in self.addresses:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        host, _, port = self.addresses["HTTPS"].rpartition(":")
        return host, int(port)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self._reader.join(2)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        if self._own_dir is not None:
            self._own_dir.cleanup()
            self._own_dir = None

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_flag(arg: str, name: str) -> bool:
    """True when `arg` is Go flag `name` (``-name``/``--name``, with or without ``=value``)."""
    return arg.lstrip("-").split("=", 1)[0] == name and arg.startswith("-")


def _last_flag_value(argv: Sequence[str], name: str) -> str | None:
    """The value the last ``--name=value`` or ``--name value`` in `argv` gives (Go's flag
    package keeps the last), or None when the flag is absent."""
    value = None
    for i, arg in enumerate(argv):
        if not _is_flag(arg, name):
            continue
        if "=" in arg:
            value = arg.split("=", 1)[1]
        elif i + 1 < len(argv):
            value = argv[i + 1]
    return value


def pythonpath_env() -> dict[str, str]:
    """The environment with this checkout importable (for subprocesses)."""
    env = dict(os.environ)
    # this file is trionsq/testing/__init__.py: the checkout is three levels up
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports nothing listens on at 127.0.0.1 (all bound at once, then
    released), for daemons that must know their ports before they start."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
