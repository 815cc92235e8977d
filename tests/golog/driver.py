"""Drive an NSQ daemon, Go's or trionsq's, through a fixed script of actions over real sockets
and collect the log lines it prints for each step, masked.

A script (`scripts.py`) starts its daemons with the same flags whichever build runs them
(127.0.0.1, kernel-chosen ports, never NSQ's default ones), then runs named steps; after each
step the driver waits for the daemon's lines to settle and files them under the step. Masking
turns what differs from run to run into placeholders: the timestamp, every address the script
knows (the daemons' listeners and the script's own connections, by name: ``<A>``, ``<http>``,
``<lookupd-tcp>``, ...), bare port numbers of the daemons, the data path, the host name, the
build token of the version line and Go durations (access lines, lookupd's ``last ping``).

Recording (`record.py`, against Go's binaries) waits for each step's lines to go quiet; the
test waits for as many lines as the golden step holds, then a short grace for extra ones.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"

_LISTEN = re.compile(r"\b(TCP|HTTP|HTTPS): listening on (\S+)$")
_STAMP = re.compile(r"^(\[[\w.-]+\] )\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} ")
_BUILD = re.compile(r"\(built w/[a-z0-9.-]+\)")
#: Go's time.Duration.String(): 0s, 999ns, 1.47µs, 2.345ms, 1.2s, 1m2.5s, 1h0m0s.
_GO_DURATION = r"(?:0s|\d+(?:\.\d+)?(?:ns|µs|ms)|(?:\d+h)?(?:\d+m)?\d+(?:\.\d+)?s)"
_ACCESS_DURATION = re.compile(r"( INFO: \d{3} [A-Z]+ \S+ \(<[\w-]+>\) )" + _GO_DURATION + "$")
_PING_DURATION = re.compile(r"(\(last ping )" + _GO_DURATION + r"\)")
_LOOPBACK = re.compile(r"\b127\.0\.0\.1:\d+\b")


class Family:
    """How to run one build's daemons: ``argv(daemon)`` is the command before the flags."""

    def __init__(self, name: str, argv: Callable[[str], list[str]]) -> None:
        self.name = name
        self.argv = argv


def go_family(bin_dir: str) -> Family:
    """Go NSQ's binaries in `bin_dir`."""
    return Family("go", lambda daemon: [os.path.join(bin_dir, daemon)])


def trionsq_family() -> Family:
    """``python -m trionsq <daemon>`` from this checkout."""
    return Family("trionsq", lambda daemon: [sys.executable, "-m", "trionsq", daemon])


class Proc:
    """A daemon subprocess whose stderr lines are collected by a thread."""

    def __init__(self, name: str, argv: Sequence[str], ready: Sequence[str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self.addresses: dict[str, str] = {}
        self._cond = threading.Condition()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=env,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 20
        with self._cond:
            while not all(r in self.addresses for r in ready):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{name} did not start:\n" + "\n".join(self.lines))
                self._cond.wait(0.05)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.rstrip("\n")
            with self._cond:
                self.lines.append(line)
                m = _LISTEN.search(line)
                if m:
                    self.addresses.setdefault(m.group(1), m.group(2))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def address(self, kind: str) -> tuple[str, int]:
        host, _, port = self.addresses[kind].rpartition(":")
        return host, int(port)

    def count(self) -> int:
        with self._cond:
            return len(self.lines)

    def wait_quiet(self, period: float, timeout: float = 10.0) -> None:
        """Until no line has come for `period` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = len(self.lines)
            while time.monotonic() < deadline:
                self._cond.wait(period)
                if len(self.lines) == seen:
                    return
                seen = len(self.lines)

    def wait_for(self, count: int, timeout: float) -> None:
        """Until `count` lines in all (or `timeout`, or the process's end)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.lines) < count and time.monotonic() < deadline:
                if self.proc.poll() is not None and not self._reader.is_alive():
                    return
                self._cond.wait(0.02)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait for the exit and the last line."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self._reader.join(2)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@dataclass
class Step:
    """A step's name, how its lines are compared, and its masked lines."""

    name: str
    mode: str  # "groups" or "multiset"
    lines: list[str] = field(default_factory=list)


class Masker:
    """Replaces what differs between runs with placeholders."""

    def __init__(self) -> None:
        self._literals: dict[str, str] = {}
        self._ports: dict[str, str] = {}

    def name_address(self, address: str, placeholder: str) -> None:
        """``127.0.0.1:PORT`` (as a daemon prints a peer or a listener) -> ``<placeholder>``."""
        self._literals[address] = f"<{placeholder}>"

    def name_port(self, port: int, placeholder: str) -> None:
        """A daemon's port printed alone (``TCPPort:4150``) -> ``<placeholder>``."""
        self._ports[str(port)] = f"<{placeholder}>"

    def name_literal(self, text: str, placeholder: str) -> None:
        self._literals[text] = f"<{placeholder}>"

    def mask(self, line: str) -> str:
        line = _STAMP.sub(r"\1<time> ", line)
        for literal in sorted(self._literals, key=len, reverse=True):
            line = line.replace(literal, self._literals[literal])
        line = _LOOPBACK.sub("<addr>", line)
        if self._ports:
            line = re.sub(
                r"\b(" + "|".join(self._ports) + r")\b", lambda m: self._ports[m.group(1)], line
            )
        line = _BUILD.sub("(built w/<build>)", line)
        line = _ACCESS_DURATION.sub(r"\1<duration>", line)
        return _PING_DURATION.sub(r"\1<duration>)", line)


class Run:
    """One run of a script: its daemons, its steps' lines, and (in a test) the golden steps
    whose line counts tell how long to wait."""

    def __init__(self, family: Family, expected: list[Step] | None = None) -> None:
        self.family = family
        self.expected = {s.name: s for s in expected} if expected is not None else None
        self.masker = Masker()
        self.masker.name_literal(socket.gethostname(), "hostname")
        self.steps: list[Step] = []
        self.main: Proc | None = None
        self._procs: list[Proc] = []
        self._seen = 0
        self._tmp = tempfile.mkdtemp(prefix="golog-")
        self.masker.name_literal(self._tmp, "tmp")
        #: Lines of trionsq's that Go does not print (allowed extras): dropped before comparing.
        self.extras: list[re.Pattern[str]] = []

    def tmpdir(self, name: str) -> str:
        path = os.path.join(self._tmp, name)
        os.makedirs(path)
        return path

    def start(self, daemon: str, flags: Sequence[str], main: bool = False) -> Proc:
        """Start `daemon` with `flags`; its listeners get placeholders ``<daemon-tcp>`` ...
        With `main`, its lines are the ones the script records, starting with step "start"."""
        ready = ["HTTP"] if daemon == "nsqadmin" else ["TCP", "HTTP"]
        with self._maybe_step("start" if main else None):
            proc = Proc(daemon, self.family.argv(daemon) + list(flags), ready)
            self._procs.append(proc)
            if main:
                self.main = proc
            for kind, address in proc.addresses.items():
                self.masker.name_address(address, f"{daemon}-{kind.lower()}")
                self.masker.name_port(proc.address(kind)[1], f"{daemon}-{kind.lower()}-port")
        return proc

    @contextmanager
    def _maybe_step(self, name: str | None) -> Iterator[None]:
        if name is None:
            yield
        else:
            with self.step(name):
                yield

    @contextmanager
    def step(self, name: str, mode: str = "groups") -> Iterator[None]:
        """Run the body, then file the main daemon's new lines under step `name`."""
        yield
        assert self.main is not None
        if self.expected is None:
            self.main.wait_quiet(0.4)
        else:
            want = self.expected.get(name)
            count = len(want.lines) if want else 0
            self.main.wait_for(self._seen + count + self._extra_count(), 3.0)
            # a short grace for lines beyond Go's; in the last step the process has ended
            if self.main.proc.poll() is None:
                time.sleep(0.05)
                # extras arrive with the rest: wait for Go's count beyond them too
                self.main.wait_for(self._seen + count + self._extra_count(), 0.5)
        with self.main._cond:
            new = self.main.lines[self._seen :]
        self._seen += len(new)
        self.steps.append(Step(name, mode, [self.masker.mask(line) for line in new]))

    def _extra_count(self) -> int:
        assert self.main is not None
        with self.main._cond:
            new = self.main.lines[self._seen :]
        return sum(1 for line in new if self.is_extra(self.masker.mask(line)))

    def is_extra(self, masked: str) -> bool:
        return any(p.search(masked) for p in self.extras)

    def connect(self, proc: Proc, name: str) -> Conn:
        """A TCP connection to `proc`'s TCP listener; the daemon's view of it is ``<name>``."""
        conn = Conn(proc.address("TCP"))
        self.masker.name_address(conn.local, name)
        return conn

    def http(self, proc: Proc, name: str = "http") -> HTTP:
        """A keep-alive HTTP connection to `proc`'s HTTP listener, shown as ``<name>`` (when the
        server closes it, the next request opens another under the same name)."""
        return HTTP(proc.address("HTTP"), lambda local: self.masker.name_address(local, name))

    def stop(self, proc: Proc) -> int:
        return proc.terminate()

    def close(self) -> None:
        for proc in reversed(self._procs):
            proc.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


class Conn:
    """A blocking TCP connection speaking raw bytes (NSQ's V2 or lookupd's V1 framing)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=5)
        host, port = self.sock.getsockname()[:2]
        self.local = f"{host}:{port}"
        self._buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def frame(self) -> tuple[int, bytes]:
        """One V2 frame: (type, data), heartbeats answered with NOP and skipped."""
        while True:
            (size,) = struct.unpack(">l", self._read(4))
            data = self._read(size)
            frame_type = struct.unpack(">l", data[:4])[0]
            if frame_type == 0 and data[4:] == b"_heartbeat_":
                self.send(b"NOP\n")
                continue
            return frame_type, data[4:]

    def recv_some(self) -> bytes:
        """Whatever comes next (at least a byte), undecoded."""
        if self._buf:
            data, self._buf = self._buf, b""
            return data
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        return data

    def v1_response(self) -> bytes:
        """One lookupd V1 response: size-prefixed data."""
        (size,) = struct.unpack(">l", self._read(4))
        return self._read(size)

    def close(self) -> None:
        """Close as a well-behaved client does: end the sending side, read what the daemon
        still sends until it closes too (closing with unread data would send a reset, and
        the daemon would log that instead)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(2)
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        self.sock.close()


class HTTP:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, address: tuple[str, int], on_connect: Callable[[str], None]) -> None:
        self.address = address
        self.on_connect = on_connect
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.address[0], self.address[1], timeout=10)
        conn.connect()
        assert conn.sock is not None
        host, port = conn.sock.getsockname()[:2]
        self.on_connect(f"{host}:{port}")
        return conn

    def request(
        self, method: str, path: str, body: bytes | str | None = None, json_body: object = None
    ) -> tuple[int, bytes]:
        headers = {}
        if json_body is not None:
            body = json.dumps(json_body)
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
        except (ConnectionError, http.client.RemoteDisconnected):
            self.conn.close()  # the server closed an idle keep-alive connection
            self.conn = self._connect()
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self.conn.close()


# -- V2 commands ----------------------------------------------------------------------------


def body_command(line: str, body: bytes) -> bytes:
    return line.encode() + b"\n" + struct.pack(">l", len(body)) + body


def mpub_body(messages: Sequence[bytes]) -> bytes:
    parts = [struct.pack(">l", len(messages))]
    for m in messages:
        parts.append(struct.pack(">l", len(m)) + m)
    return b"".join(parts)


# -- golden files ---------------------------------------------------------------------------


def write_golden(path: Path, header: str, steps: Sequence[Step]) -> None:
    out = [f"# {line}" for line in header.splitlines()]
    for step in steps:
        out.append(f"== {step.name} [{step.mode}]")
        out.extend(step.lines)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def read_golden(path: Path) -> list[Step]:
    steps: list[Step] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# ") or line == "#":
            continue
        m = re.fullmatch(r"== (.+) \[(groups|multiset)\]", line)
        if m:
            steps.append(Step(m.group(1), m.group(2)))
        else:
            steps[-1].lines.append(line)
    return steps
