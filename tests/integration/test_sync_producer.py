"""`SyncProducer` (issue 35): blocking publishes from plain threads against a real nsqd
(`DaemonProcess` on 127.0.0.1 port 0): PUB/MPUB/DPUB land (plain, snappy, deflate, TLS with
AUTH), errors are the Producer's `ClientError`s, concurrent threads publish exactly once each
on the one connection, an idle connection nsqd closed after its heartbeat timeout is replaced
before the next write, a restarted nsqd is reconnected to, a refused address fails the
constructor in Go's words, `close` waits for the publish under way (and interrupts one that
nsqd does not answer), a per-call timeout, a fork, and docs/examples/sync_publish.py. A socket
server in nsqd's place sees the heartbeats answered and nothing written to a dead connection.
No test leaves a thread behind: SyncProducer starts none."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trustme

from trionsq.client import (
    ClientError,
    ConnectionClosedError,
    NotConnectedError,
    NSQError,
    TLSError,
)
from trionsq.client.sync_producer import PublishTimeoutError, SyncProducer
from trionsq.testing import DaemonProcess, free_ports, pythonpath_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "sync_publish.py"
#: nsqd refuses bodies over this (E_BAD_MESSAGE, a fatal error: it closes the connection).
MAX_MSG_SIZE = 1024


def tcp(daemon: DaemonProcess) -> str:
    host, port = daemon.tcp_address
    return f"{host}:{port}"


def http(daemon: DaemonProcess, path: str, method: str = "GET") -> bytes:
    assert daemon.http_address is not None
    url = "http://{}:{}{}".format(*daemon.http_address, path)
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as r:
        body: bytes = r.read()
    return body


def topic_stats(daemon: DaemonProcess, topic: str) -> dict[str, Any]:
    """The topic's entry of nsqd's ``/stats?format=json`` (an empty dict if it has none)."""
    stats = json.loads(http(daemon, f"/stats?format=json&topic={topic}"))
    for entry in stats.get("topics") or []:
        if entry["topic_name"] == topic:
            found: dict[str, Any] = entry
            return found
    return {}


def message_count(daemon: DaemonProcess, topic: str) -> int:
    return int(topic_stats(daemon, topic).get("message_count", 0))


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def nsqd() -> Iterator[DaemonProcess]:
    with DaemonProcess(
        "nsqd", args=[f"--max-msg-size={MAX_MSG_SIZE}"], env=pythonpath_env()
    ) as daemon:
        yield daemon


@pytest.fixture
def refused_address() -> Iterator[str]:
    """A port held bound but not listening: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


# -- publishing -----------------------------------------------------------------------------


def test_publish_mpublish_dpublish_land(nsqd: DaemonProcess) -> None:
    http(nsqd, "/topic/create?topic=sync_land", "POST")
    http(nsqd, "/channel/create?topic=sync_land&channel=ch", "POST")
    with SyncProducer(tcp(nsqd)) as producer:
        producer.publish("sync_land", b"one")
        producer.mpublish("sync_land", (b"two", b"three", b"four"))  # any iterable
        producer.dpublish("sync_land", 60_000, b"later")
        assert topic_stats(nsqd, "sync_land")["message_count"] == 5

    def delivered() -> bool:
        channel = topic_stats(nsqd, "sync_land")["channels"][0]
        return bool(channel["depth"] == 4 and channel["deferred_count"] == 1)

    eventually(delivered)


@pytest.mark.parametrize("feature", ["snappy", "deflate"])
def test_compressed_connections_publish(nsqd: DaemonProcess, feature: str) -> None:
    topic = f"sync_{feature}"
    with SyncProducer(tcp(nsqd), **{feature: True}) as producer:
        for i in range(20):
            producer.publish(topic, b"compressible %d " % i * 30)
        producer.mpublish(topic, [b"batch %d " % i * 30 for i in range(50)])
        producer.dpublish(topic, 60_000, b"later")
    assert message_count(nsqd, topic) == 71


def test_errors_are_the_producers(nsqd: DaemonProcess) -> None:
    with SyncProducer(tcp(nsqd)) as producer:
        with pytest.raises(NSQError) as info:
            producer.publish("bad topic!", b"x")
        assert info.value.code == "E_BAD_TOPIC"
        with pytest.raises(NSQError) as info:
            producer.publish("sync_errors", b"")
        assert info.value.code == "E_BAD_MESSAGE"
        with pytest.raises(NSQError) as info:
            producer.mpublish("sync_errors", [])
        assert info.value.code == "E_BAD_BODY"
        with pytest.raises(NSQError) as info:
            producer.dpublish("bad topic!", 10, b"x")
        assert info.value.code == "E_BAD_TOPIC"
        # nsqd's own answer (fatal: it closes the connection) ...
        with pytest.raises(NSQError) as info:
            producer.publish("sync_errors", b"x" * (MAX_MSG_SIZE + 1))
        assert info.value.code == "E_BAD_MESSAGE"
        assert info.value.fatal
        assert isinstance(info.value, ClientError)
        # ... and the next publish reconnects.
        producer.publish("sync_errors", b"fine")
        assert topic_stats(nsqd, "sync_errors")["message_count"] == 1


def test_eight_threads_publish_each_message_exactly_once(nsqd: DaemonProcess) -> None:
    threads_n, per_thread = 8, 200
    errors: list[BaseException] = []
    with SyncProducer(tcp(nsqd)) as producer:
        start = threading.Barrier(threads_n)

        def publisher(i: int) -> None:
            start.wait()
            try:
                for j in range(per_thread):
                    producer.publish("sync_threads", b"%d-%d" % (i, j))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=publisher, args=(i,)) for i in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert errors == []
    stats = topic_stats(nsqd, "sync_threads")
    assert stats["message_count"] == stats["depth"] == threads_n * per_thread


# -- heartbeats and dead connections --------------------------------------------------------


def test_an_idle_producer_outlives_nsqds_heartbeat_timeout(nsqd: DaemonProcess) -> None:
    """nsqd closes a connection it heard nothing on for two heartbeat intervals (1 s asked,
    nsqd's minimum): the next publish finds it closed before writing and reconnects."""
    with SyncProducer(tcp(nsqd), heartbeat_interval=1) as producer:
        time.sleep(2.5)
        producer.publish("sync_idle", b"after a nap", timeout=5)
        assert message_count(nsqd, "sync_idle") == 1
        time.sleep(2.5)  # and again, on the new connection
        producer.publish("sync_idle", b"after another", timeout=5)
    assert message_count(nsqd, "sync_idle") == 2


_OK_FRAME = struct.pack(">Ii", 6, 0) + b"OK"
_HEARTBEAT_FRAME = struct.pack(">Ii", 15, 0) + b"_heartbeat_"


class ScriptedNsqd:
    """Plays nsqd on 127.0.0.1 port 0: answers IDENTIFY with OK (an nsqd without feature
    negotiation), then runs each accepted connection's script (one per connection, in
    order) with a `Peer`; records what each connection received."""

    def __init__(self, *scripts: Callable[[ScriptedNsqd.Peer], None]) -> None:
        self.scripts = list(scripts)
        self.received: list[list[str]] = []
        self.errors: list[BaseException] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    class Peer:
        def __init__(self, conn: socket.socket, log: list[str]) -> None:
            self.conn = conn
            self.reader = conn.makefile("rb")
            self.log = log

        def command(self) -> str:
            """The next command: its line, with the body (if any) after a space."""
            line = self.reader.readline()
            if not line:
                self.log.append("EOF")
                return "EOF"
            text = line.decode().rstrip("\n")
            if text.split()[0] in ("PUB", "MPUB", "DPUB", "IDENTIFY", "AUTH"):
                (size,) = struct.unpack(">I", self.reader.read(4))
                body = self.reader.read(size)
                if not text.startswith("IDENTIFY"):
                    text += " " + body.decode(errors="replace")
            self.log.append(text)
            return text

        def send(self, data: bytes) -> None:
            self.conn.sendall(data)

    def _serve(self) -> None:
        for script in self.scripts:
            conn, _ = self.listener.accept()
            conn.settimeout(10)
            log: list[str] = []
            self.received.append(log)
            peer = self.Peer(conn, log)
            try:
                assert peer.reader.read(4) == b"  V2"
                assert peer.command() == "IDENTIFY"
                log.clear()
                peer.send(_OK_FRAME)
                script(peer)
            except BaseException as exc:  # pragma: no cover - reported by the test
                self.errors.append(exc)
            finally:
                peer.reader.close()  # the socket's descriptor stays open while it is not
                conn.close()

    def close(self) -> None:
        self.listener.close()
        self.thread.join(10)


def test_heartbeats_are_answered_before_the_command_and_while_waiting() -> None:
    def script(peer: ScriptedNsqd.Peer) -> None:
        peer.send(_HEARTBEAT_FRAME)  # while the producer is idle
        assert peer.command() == "NOP"  # answered in front of the PUB
        assert peer.command() == "PUB sync_hb one"
        peer.send(_HEARTBEAT_FRAME)  # before the answer
        assert peer.command() == "NOP"
        peer.send(_OK_FRAME)
        assert peer.command() == "EOF"

    server = ScriptedNsqd(script)
    try:
        with SyncProducer(server.address) as producer:
            time.sleep(0.3)  # the heartbeat arrives
            producer.publish("sync_hb", b"one", timeout=5)
    finally:
        server.close()
    assert server.errors == []
    assert server.received == [["NOP", "PUB sync_hb one", "NOP", "EOF"]]


def test_nothing_is_written_to_a_connection_nsqd_closed() -> None:
    def closes(peer: ScriptedNsqd.Peer) -> None:
        peer.send(_HEARTBEAT_FRAME)  # a heartbeat, then the end of the connection

    def answers(peer: ScriptedNsqd.Peer) -> None:
        assert peer.command() == "PUB sync_dead one"
        peer.send(_OK_FRAME)
        assert peer.command() == "EOF"

    server = ScriptedNsqd(closes, answers)
    try:
        with SyncProducer(server.address) as producer:
            time.sleep(0.3)  # the first connection is closed by now
            producer.publish("sync_dead", b"one", timeout=5)
    finally:
        server.close()
    assert server.errors == []
    assert server.received == [[], ["PUB sync_dead one", "EOF"]]


def test_a_connection_lost_after_the_write_is_an_unknown_outcome() -> None:
    def drops(peer: ScriptedNsqd.Peer) -> None:
        assert peer.command() == "PUB sync_lost one"  # read, never answered

    def answers(peer: ScriptedNsqd.Peer) -> None:
        assert peer.command() == "PUB sync_lost two"
        peer.send(_OK_FRAME)
        assert peer.command() == "EOF"

    server = ScriptedNsqd(drops, answers)
    try:
        with SyncProducer(server.address) as producer:
            with pytest.raises(ConnectionClosedError, match="may or may not have been"):
                producer.publish("sync_lost", b"one", timeout=5)
            producer.publish("sync_lost", b"two", timeout=5)  # on a new connection
    finally:
        server.close()
    assert server.errors == []


# -- TLS and AUTH ---------------------------------------------------------------------------

_GRANTS = {
    "alice": {
        "ttl": 60,
        "identity": "alice",
        "authorizations": [{"topic": "sync_tls.*", "channels": [".*"], "permissions": ["publish"]}],
    },
}


class _AuthHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        secret = parse_qs(urlsplit(self.path).query).get("secret", [""])[0]
        reply = _GRANTS.get(secret)
        body = json.dumps(reply or {"message": "no"}).encode()
        self.send_response(200 if reply else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def tls_auth_nsqd(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DaemonProcess, str]]:
    """An nsqd offering TLS (a trustme CA's certificate) and requiring AUTH; the CA file."""
    directory = tmp_path_factory.mktemp("sync_tls")
    ca = trustme.CA()
    pem = directory / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AuthHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        args = [
            f"--tls-cert={pem}",
            f"--tls-key={pem}",
            f"--auth-http-address=127.0.0.1:{server.server_address[1]}",
        ]
        with DaemonProcess("nsqd", args=args, env=pythonpath_env()) as daemon:
            yield daemon, str(ca_file)
    finally:
        server.shutdown()
        server.server_close()


def test_tls_and_auth(tls_auth_nsqd: tuple[DaemonProcess, str]) -> None:
    daemon, ca_file = tls_auth_nsqd
    options: dict[str, Any] = {"tls_v1": True, "tls_cafile": ca_file, "auth_secret": "alice"}
    with SyncProducer(tcp(daemon), heartbeat_interval=1, **options) as producer:
        producer.publish("sync_tls", b"secret")
        time.sleep(1.3)  # a heartbeat waits in the TLS stream: read without blocking
        producer.mpublish("sync_tls", [b"two", b"three"])
        with pytest.raises(NSQError) as info:
            producer.publish("elsewhere", b"x")  # fatal: nsqd closes the connection
        assert info.value.code == "E_UNAUTHORIZED"
        producer.dpublish("sync_tls", 60_000, b"later")  # on a new connection
    with SyncProducer(tcp(daemon), snappy=True, **options) as producer:
        producer.publish("sync_tls", b"compressed too")
    assert message_count(daemon, "sync_tls") == 5
    with pytest.raises(TLSError, match="CERTIFICATE_VERIFY_FAILED"):
        SyncProducer(tcp(daemon), tls_v1=True, auth_secret="alice")
    with pytest.raises(NSQError) as refused:
        SyncProducer(tcp(daemon), tls_v1=True, tls_cafile=ca_file, auth_secret="nobody")
    assert refused.value.code == "E_AUTH_FAILED"
    with pytest.raises(ClientError, match="requires AUTH"):
        SyncProducer(tcp(daemon), tls_v1=True, tls_cafile=ca_file)


# -- connecting -----------------------------------------------------------------------------


def test_reconnects_after_nsqd_restarts_on_the_same_port(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    args = [f"--tcp-address=127.0.0.1:{port}"]
    (tmp_path / "a").mkdir()
    first = DaemonProcess("nsqd", args=args, data_path=str(tmp_path / "a"), env=pythonpath_env())
    try:
        producer = SyncProducer(f"127.0.0.1:{port}")
        producer.publish("sync_restart", b"before")
        assert topic_stats(first, "sync_restart")["message_count"] == 1
    finally:
        first.terminate()
        first.close()
    try:
        # nsqd is gone: a publish tries to reconnect and says why it could not.
        with pytest.raises(NotConnectedError) as info:
            producer.publish("sync_restart", b"while down")
        assert str(info.value) == f"dial tcp 127.0.0.1:{port}: connect: connection refused"
        (tmp_path / "b").mkdir()
        with DaemonProcess(
            "nsqd", args=args, data_path=str(tmp_path / "b"), env=pythonpath_env()
        ) as second:
            producer.publish("sync_restart", b"after")
            assert topic_stats(second, "sync_restart")["message_count"] == 1
    finally:
        producer.close()


def test_refused_address_fails_the_constructor_in_gos_words(refused_address: str) -> None:
    before = set(threading.enumerate())
    with pytest.raises(NotConnectedError) as info:
        SyncProducer(refused_address)
    assert not isinstance(info.value, BaseExceptionGroup)
    assert str(info.value) == f"dial tcp {refused_address}: connect: connection refused"
    assert "\n" not in str(info.value)
    assert set(threading.enumerate()) == before


def test_a_bad_address_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="missing port"):
        SyncProducer("127.0.0.1")


def test_a_silent_peer_is_a_handshake_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts, never answers
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(NotConnectedError, match=r"no answer to IDENTIFY within 0\.3 s"):
            SyncProducer(address, connect_timeout=0.3)
        assert time.monotonic() - started < 3


# -- closing --------------------------------------------------------------------------------


def test_close_is_idempotent_and_refuses_publishes(nsqd: DaemonProcess) -> None:
    before = set(threading.enumerate())
    producer = SyncProducer(tcp(nsqd))
    assert set(threading.enumerate()) == before  # no thread of its own
    producer.publish("sync_close", b"x")
    assert not producer.closed
    assert repr(producer) == f"<SyncProducer {tcp(nsqd)}>"
    producer.close()
    assert producer.closed
    assert repr(producer) == f"<SyncProducer {tcp(nsqd)} closed>"
    producer.close()  # idempotent
    for publish in (
        lambda: producer.publish("sync_close", b"x"),
        lambda: producer.mpublish("sync_close", [b"x"]),
        lambda: producer.dpublish("sync_close", 10, b"x"),
    ):
        with pytest.raises(ConnectionClosedError, match="SyncProducer is closed"):
            publish()
    with SyncProducer(tcp(nsqd)) as producer:
        producer.publish("sync_close", b"y")
    assert producer.closed
    assert set(threading.enumerate()) == before
    assert topic_stats(nsqd, "sync_close")["message_count"] == 2


def test_close_waits_for_publishes_under_way(nsqd: DaemonProcess) -> None:
    """Threads publish in a loop while another closes: every publish either returned (and
    its message is in nsqd) or raised "closed" (and was never sent)."""
    producer = SyncProducer(tcp(nsqd))
    ok = [0] * 6
    errors: list[BaseException] = []

    def publisher(i: int) -> None:
        try:
            while True:
                producer.publish("sync_flush", b"x")
                ok[i] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=publisher, args=(i,)) for i in range(len(ok))]
    for thread in threads:
        thread.start()
    eventually(lambda: sum(ok) >= 200)
    producer.close()
    for thread in threads:
        thread.join(30)
    assert len(errors) == len(ok)
    assert all(isinstance(e, ConnectionClosedError) for e in errors), errors
    assert {str(e) for e in errors} == {"SyncProducer is closed"}
    assert topic_stats(nsqd, "sync_flush")["message_count"] == sum(ok)


@pytest.fixture
def stoppable_nsqd() -> Iterator[DaemonProcess]:
    """An nsqd of its own, for tests that SIGSTOP it (resumed at the end in any case)."""
    with DaemonProcess("nsqd", env=pythonpath_env()) as daemon:
        try:
            yield daemon
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)


def test_a_call_times_out_when_nsqd_does_not_answer(stoppable_nsqd: DaemonProcess) -> None:
    daemon = stoppable_nsqd
    with SyncProducer(tcp(daemon)) as p:
        p.publish("sync_timeout", b"first")
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(PublishTimeoutError) as info:
                p.publish("sync_timeout", b"second", timeout=0.5)
            assert 0.4 < time.monotonic() - started < 5
            assert isinstance(info.value, ClientError)
            assert isinstance(info.value, TimeoutError)
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        # The outcome was unknown: here nsqd, resumed, publishes it after all.
        eventually(lambda: message_count(daemon, "sync_timeout") == 2)
        p.publish("sync_timeout", b"third", timeout=10)  # on a new connection
    assert message_count(daemon, "sync_timeout") == 3


def test_close_interrupts_a_publish_nsqd_does_not_answer(stoppable_nsqd: DaemonProcess) -> None:
    daemon = stoppable_nsqd
    producer = SyncProducer(tcp(daemon))
    producer.publish("sync_stuck", b"first")
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    errors: list[BaseException] = []

    def publisher() -> None:
        try:
            producer.publish("sync_stuck", b"unanswered")  # the default timeout: 60 s
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=publisher)
    thread.start()
    eventually(producer._lock.locked)  # the publish under way holds the connection
    time.sleep(0.2)  # and waits for the answer
    started = time.monotonic()
    producer.close(timeout=0.3)
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - started < 3
    assert len(errors) == 1
    assert isinstance(errors[0], ConnectionClosedError)
    assert "may or may not have been published" in str(errors[0])
    with pytest.raises(ConnectionClosedError, match="SyncProducer is closed"):
        producer.publish("sync_stuck", b"x")


def test_a_producer_created_before_fork_connects_anew_in_the_child(nsqd: DaemonProcess) -> None:
    with SyncProducer(tcp(nsqd)) as producer:
        producer.publish("sync_fork", b"parent")
        # Held at the fork, as by another thread of the parent mid-publish: the child's copy
        # of the lock stays held, and the child makes itself a new one.
        with producer._lock:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                code = 1
                try:
                    producer.publish("sync_fork", b"child", timeout=10)
                    producer.close()
                    code = 0
                except BaseException:
                    code = 2
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        producer.publish("sync_fork", b"parent again")  # the parent's connection still works
    assert topic_stats(nsqd, "sync_fork")["message_count"] == 3


# -- the example ----------------------------------------------------------------------------


def test_example_script_publishes() -> None:
    with DaemonProcess("nsqd", env=pythonpath_env()) as daemon:
        done = subprocess.run(
            [sys.executable, str(EXAMPLE)],
            env={**pythonpath_env(), "NSQD_TCP_ADDRESS": tcp(daemon)},
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(EXAMPLE.parent),
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "refused: E_BAD_TOPIC",
            "published 11 signups and 1 reminder",
        ]
        assert topic_stats(daemon, "signups")["message_count"] == 11
        assert topic_stats(daemon, "reminders")["message_count"] == 1
