"""Go nsqd and trionsq's checksum side files (trionsq/diskqueue/checksums.py) on one data
directory, in turn: Go reads what trionsq wrote, side files and all, and writes on; trionsq
then reads Go's records unchecked, its own checked, removes the side files of segments Go
deleted, and calls nothing corrupt. Needs Go's nsqd: ``TRIONSQ_GO_NSQD=/path/to/nsqd``
(skipped without it)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

GO_NSQD = os.environ.get("TRIONSQ_GO_NSQD", "")

pytestmark = pytest.mark.skipif(
    not (GO_NSQD and os.access(GO_NSQD, os.X_OK)), reason="TRIONSQ_GO_NSQD is not set"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Daemon:
    def __init__(self, argv: list[str], log: Path) -> None:
        self.port = _free_port()
        self.log = log
        flags = [
            f"--tcp-address=127.0.0.1:{self.port}",
            f"--http-address=127.0.0.1:{_free_port()}",
            "--mem-queue-size=0",
            "--max-bytes-per-file=20000",
        ]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv + flags, stdout=out, stderr=subprocess.STDOUT)
        self.sock = self._connect()
        self.buf = bytearray()

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + 30
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                sock.sendall(b"  V2")
                return sock
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _frames(self, sock: socket.socket, buf: bytearray) -> list[tuple[int, bytes]]:
        data = sock.recv(1 << 20)
        if not data:
            raise EOFError
        buf += data
        out = []
        while len(buf) >= 8:
            size = struct.unpack_from(">I", buf)[0]
            if len(buf) < 4 + size:
                break
            out.append((struct.unpack_from(">I", buf, 4)[0], bytes(buf[8 : 4 + size])))
            del buf[: 4 + size]
        return out

    def publish(self, bodies: list[bytes]) -> None:
        for i in range(0, len(bodies), 100):
            batch = bodies[i : i + 100]
            body = struct.pack(">I", len(batch)) + b"".join(
                struct.pack(">I", len(b)) + b for b in batch
            )
            self.sock.sendall(b"MPUB t\n" + struct.pack(">I", len(body)) + body)
            frames: list[tuple[int, bytes]] = []
            while not frames:
                frames = self._frames(self.sock, self.buf)
            assert frames[0] == (0, b"OK"), frames

    def consume(self, count: int) -> list[bytes]:
        """Finish `count` messages (more delivered meanwhile are left to be requeued)."""
        sock, buf = self._connect(), bytearray()
        sock.sendall(b"SUB t c\n")
        while not self._frames(sock, buf):
            pass
        sock.sendall(b"RDY 1\n")
        got: list[bytes] = []
        while len(got) < count:
            for kind, data in self._frames(sock, buf):
                if kind == 2 and len(got) < count:
                    got.append(data[26:])
                    more = b"RDY 1\n" if len(got) < count else b"RDY 0\n"
                    sock.sendall(b"FIN " + data[10:26] + b"\n" + more)
        sock.sendall(b"CLS\n")
        sock.close()
        return got

    def stop(self) -> str:
        self.sock.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        return self.log.read_text(errors="replace")


def _bodies(start: int, count: int) -> list[bytes]:
    return [b"message %06d " % n + b"x" * 50 for n in range(start, start + count)]


def test_go_and_trionsq_take_turns_on_a_data_directory_with_side_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    trionsq = [sys.executable, "-m", "trionsq", "nsqd", f"--data-path={data}", "--https-address="]
    go = [GO_NSQD, f"--data-path={data}"]

    first = _Daemon(trionsq, tmp_path / "trionsq1.log")
    first.publish(_bodies(0, 1000))
    finished = first.consume(300)
    first.stop()
    assert [n for n in os.listdir(data) if n.endswith(".crc")]

    second = _Daemon(go, tmp_path / "go.log")
    finished += second.consume(700)
    second.publish(_bodies(1000, 500))
    finished += second.consume(200)
    log = second.stop()
    assert "crc" not in log

    third = _Daemon(trionsq, tmp_path / "trionsq2.log")
    finished += third.consume(300)
    third.publish(_bodies(2000, 100))
    finished += third.consume(100)
    log = third.stop()
    # every message finished (some twice: delivery is at least once across restarts)
    assert set(finished) == set(_bodies(0, 1500) + _bodies(2000, 100))
    assert "fails its checksum" not in log and "does not belong" not in log
    # the side files of the segments Go deleted are gone; trionsq's new segments have theirs
    segments = {n[: -len(".dat")] for n in os.listdir(data) if n.endswith(".dat") and "0" in n}
    sides = {n[: -len(".crc")] for n in os.listdir(data) if n.endswith(".crc")}
    assert sides <= segments and sides
