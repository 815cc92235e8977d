"""Network fuzzer: Hypothesis-generated sessions of valid, almost-valid and hostile traffic
against a live trionsq nsqd and nsqlookupd (`trionsq.testing.DaemonProcess`, 127.0.0.1 port 0).

A session is a list of actions on one connection: writes of valid commands (made with
trionsq.protocol's encoders), mutated ones, hostile ones (bad and huge declared sizes, garbage,
illegal state transitions such as RDY/FIN before SUB or a second IDENTIFY), each written whole,
split, coalesced or trickled byte by byte; the session ends with a clean close, a half close
or an abrupt reset (SO_LINGER 0). After each session:

* the daemon is alive and serves a well-behaved client: PUB of a fresh message answered OK,
  then SUB/RDY receives that very message and FIN (so no acknowledged message is lost);
* every error the daemon sent carries an NSQ error code (``E_...``);
* no file descriptor leaked: /proc/<pid>/fd counts before and after agree, allowing 3 s to
  settle.

``python -m fuzz network --examples N``; tests/unit/test_fuzz_smoke.py runs a few examples.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trionsq.protocol import commands as c
from trionsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FrameDecoder
from trionsq.protocol.message import decode_message
from trionsq.testing import DaemonProcess

#: The topic only the well-behaved client uses (sessions draw from TOPICS).
CHECK_TOPIC = "fuzz_check"
TOPICS = ["t", "fuzz_a", "fuzz_b#ephemeral", "bad topic", "x" * 70]
MSG_ID = b"0123456789abcdef"


class NetworkFailure(AssertionError):
    """A property of the network fuzzer does not hold."""


def _v2_commands() -> st.SearchStrategy[bytes]:
    topic = st.sampled_from(TOPICS)
    body = st.binary(max_size=64)
    valid = st.one_of(
        st.builds(lambda t, b: c.pub(t, b or b"x"), topic, body),
        st.builds(
            lambda t, bs: c.mpub(t, [b or b"x" for b in bs]),
            topic,
            st.lists(body, min_size=1, max_size=4),
        ),
        st.builds(lambda t, ms, b: c.dpub(t, ms, b or b"x"), topic, st.integers(0, 5000), body),
        st.builds(lambda t, ch: c.sub(t, ch), topic, st.sampled_from(["ch", "c#ephemeral", "b@d"])),
        st.builds(c.rdy, st.integers(-1, 3000)),
        st.just(c.fin(MSG_ID)),
        st.just(c.req(MSG_ID, 10)),
        st.just(c.touch(MSG_ID)),
        st.just(c.nop()),
        st.just(c.cls()),
        st.just(c.auth(b"secret")),
        st.builds(
            lambda d: c.identify(d),
            st.fixed_dictionaries(
                {},
                optional={
                    "feature_negotiation": st.booleans(),
                    "heartbeat_interval": st.integers(-2, 70_000),
                    "output_buffer_size": st.integers(-2, 70_000),
                    "sample_rate": st.integers(-1, 101),
                    "msg_timeout": st.integers(-1, 1_000_000),
                    "client_id": st.text(max_size=8),
                },
            ),
        ),
    )
    hostile = st.one_of(
        st.builds(lambda n: b"PUB t\n" + struct.pack(">i", n), st.sampled_from([-1, 0, 1 << 30])),
        st.builds(lambda n: b"MPUB t\n" + struct.pack(">ii", 100, n), st.integers(-2, 1 << 31 - 1)),
        st.builds(lambda n: b"IDENTIFY\n" + struct.pack(">i", n), st.sampled_from([-5, 1 << 30])),
        st.binary(max_size=40),
        st.just(b"X" * 17_000),
        st.just(b"FIN short\nREQ " + MSG_ID + b" notanumber\n"),
    )
    mutated = st.builds(
        lambda data, i, b: data[:i] + bytes([b]) + data[i + 1 :] if data else data,
        valid,
        st.integers(0, 80),
        st.integers(0, 255),
    )
    return st.one_of(valid, valid, hostile, mutated)


def _v1_commands() -> st.SearchStrategy[bytes]:
    body = json.dumps(
        {"broadcast_address": "127.0.0.1", "tcp_port": 1, "http_port": 2, "version": "1.3.0"}
    ).encode()
    valid = st.one_of(
        st.just(b"PING\n"),
        st.just(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body),
        st.builds(lambda t: f"REGISTER {t} ch\n".encode(), st.sampled_from(TOPICS)),
        st.builds(lambda t: f"UNREGISTER {t}\n".encode(), st.sampled_from(TOPICS)),
    )
    hostile = st.one_of(
        st.builds(lambda n: b"IDENTIFY\n" + struct.pack(">i", n), st.sampled_from([-1, 1 << 30])),
        st.binary(max_size=40),
        st.just(b"\n" * 5 + b"REGISTER\n"),
    )
    return st.one_of(valid, valid, hostile)


_WRITE_MODES = st.sampled_from(["whole", "split", "trickle"])
_ENDS = st.sampled_from(["close", "half_close", "reset"])


@st.composite
def sessions(draw: st.DrawFn) -> tuple[str, bytes, list[tuple[bytes, str]], str]:
    """``(daemon, magic, [(bytes, write mode)...], end)``."""
    daemon = draw(st.sampled_from(["nsqd", "nsqd", "nsqlookupd"]))
    magic = b"  V2" if daemon == "nsqd" else b"  V1"
    magic = draw(st.sampled_from([magic, magic, magic, b"  V3", b""]))
    commands = _v2_commands() if daemon == "nsqd" else _v1_commands()
    actions = draw(
        st.lists(st.tuples(st.lists(commands, min_size=1, max_size=4), _WRITE_MODES), max_size=6)
    )
    return daemon, magic, [(b"".join(cmds), mode) for cmds, mode in actions], draw(_ENDS)


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _read_available(sock: socket.socket, wait: float) -> bytes:
    sock.settimeout(wait)
    out = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            out += data
            sock.settimeout(0.05)
    except (TimeoutError, BlockingIOError, ConnectionError, OSError):
        pass
    return out


def _check_errors(daemon: str, received: bytes) -> None:
    if daemon == "nsqd":
        dec = FrameDecoder()
        dec.feed(received)
        for frame_type, data in dec.frames():
            if frame_type == FRAME_TYPE_ERROR and not data.startswith(b"E_"):
                raise NetworkFailure(f"error frame without an NSQ code: {data[:100]!r}")
        return
    pos = 0
    while pos + 4 <= len(received):
        (size,) = struct.unpack_from(">I", received, pos)
        data = received[pos + 4 : pos + 4 + size]
        pos += 4 + size
        if data and data != b"OK" and not data.startswith((b"{", b"E_")):
            raise NetworkFailure(f"lookupd answer is neither OK, JSON nor E_: {data[:100]!r}")


def run_session(daemons: dict[str, DaemonProcess], session: tuple) -> None:  # type: ignore[type-arg]
    """Play one session, then check the daemons (see the module docstring)."""
    daemon, magic, actions, end = session
    proc = daemons[daemon]
    pid = proc.proc.pid
    before = _fd_count(pid)
    sock = socket.create_connection(proc.tcp_address, timeout=5)
    received = b""
    try:
        sock.sendall(magic)
        for data, mode in actions:
            try:
                if mode == "whole":
                    sock.sendall(data)
                elif mode == "split":
                    for i in range(0, len(data), 3):
                        sock.sendall(data[i : i + 3])
                else:
                    for i in range(min(len(data), 40)):
                        sock.sendall(data[i : i + 1])
                        time.sleep(0.001)
                    sock.sendall(data[40:])
            except OSError:
                break  # the daemon closed the connection (a fatal error)
            received += _read_available(sock, 0.02)
        if end == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif end == "half_close":
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            received += _read_available(sock, 0.2)
    finally:
        sock.close()
    _check_errors(daemon, received)
    for name, p in daemons.items():
        if p.proc.poll() is not None:
            raise NetworkFailure(f"{name} died:\n" + "".join(p.stderr_lines[-20:]))
    check_well_behaved(daemons["nsqd"])
    deadline = time.monotonic() + 3
    while _fd_count(pid) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    if _fd_count(pid) > before:
        raise NetworkFailure(f"{daemon} leaked fds: {before} -> {_fd_count(pid)}")


def check_well_behaved(nsqd: DaemonProcess) -> None:
    """PUB a fresh message (OK), then SUB/RDY must deliver it; FIN it."""
    body = uuid.uuid4().hex.encode()
    with socket.create_connection(nsqd.tcp_address, timeout=5) as sock:
        dec = FrameDecoder()

        def frame() -> tuple[int, bytes]:
            while (f := dec.next_frame()) is None:
                data = sock.recv(65536)
                if not data:
                    raise NetworkFailure("nsqd closed the well-behaved connection")
                dec.feed(data)
            return f

        sock.sendall(c.MAGIC_V2 + c.pub(CHECK_TOPIC, body))
        if frame() != (0, b"OK"):
            raise NetworkFailure("PUB not acknowledged")
        sock.sendall(c.sub(CHECK_TOPIC, "ch") + c.rdy(100))
        if frame() != (0, b"OK"):
            raise NetworkFailure("SUB refused")
        while True:
            frame_type, data = frame()
            if frame_type == FRAME_TYPE_MESSAGE:
                msg = decode_message(data)
                sock.sendall(c.fin(msg.id))
                if msg.body == body:
                    break
            elif frame_type == FRAME_TYPE_ERROR:
                raise NetworkFailure(f"error to the well-behaved client: {data!r}")
        sock.sendall(c.cls())


@contextmanager
def live_daemons() -> Iterator[dict[str, DaemonProcess]]:
    """An nsqd and an nsqlookupd on 127.0.0.1 port 0."""
    with DaemonProcess("nsqd") as nsqd, DaemonProcess("nsqlookupd") as lookupd:
        yield {"nsqd": nsqd, "nsqlookupd": lookupd}


def run_sessions(examples: int, daemons: dict[str, DaemonProcess] | None = None) -> None:
    """Run `examples` Hypothesis sessions (raises on the first failing one, shrunk)."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(sessions())
    def fuzz_session(session: tuple) -> None:  # type: ignore[type-arg]
        assert daemons is not None
        run_session(daemons, session)

    if daemons is not None:
        fuzz_session()
        return
    with live_daemons() as daemons:
        fuzz_session()
        print(f"network: {examples} sessions passed")
