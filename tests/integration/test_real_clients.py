"""Real NSQ client libraries against `trionsq nsqd`: pynsq (tornado) and gnsq (gevent).

Each client scenario runs in its own subprocess (scripts under ``clients/``), since tornado's
and gevent's loops must not share the test process with trio; the script prints one JSON line
that the test checks. After each scenario a plain-socket subscriber checks that nothing was
left on the channel (the daemon runs with ``--msg-timeout=2s``, so an unfinished message would
come back within the check's window).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from trionsq.testing import DaemonProcess, pythonpath_env

CLIENTS = Path(__file__).parent / "clients"
#: The scripts' own deadline; the test kills a script that outlives it by more than a margin.
SCRIPT_TIMEOUT = 30.0
MSG_TIMEOUT = 2.0
COUNT = 50

_HEADER = struct.Struct(">Ii")


def _needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} is not installed"
    )


@pytest.fixture
def nsqd() -> Iterator[DaemonProcess]:
    with DaemonProcess(
        "nsqd", args=[f"--msg-timeout={MSG_TIMEOUT:g}s"], env=pythonpath_env()
    ) as daemon:
        yield daemon


def run_client(
    script: str, mode: str, daemon: DaemonProcess, topic: str, conn_options: dict | None = None
) -> dict:
    host, port = daemon.tcp_address
    argv = [
        sys.executable,
        str(CLIENTS / script),
        mode,
        f"{host}:{port}",
        topic,
        str(COUNT),
        str(SCRIPT_TIMEOUT),
    ]
    if conn_options is not None:
        argv.append(json.dumps(conn_options))
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT + 20,
            env=pythonpath_env(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:  # run() has killed it
        pytest.fail(f"{script} {mode} hung; stderr:\n{exc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, (
        f"{script} {mode} exited {proc.returncode} without a result\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}\n"
        f"nsqd log:\n{''.join(daemon.stderr_lines[-40:])}"
    )
    result = json.loads(lines[-1])
    assert result["ok"], (
        f"{script} {mode}: {result['error']}\nstderr:\n{proc.stderr[-4000:]}\n"
        f"nsqd log:\n{''.join(daemon.stderr_lines[-40:])}"
    )
    return result


def leftover_messages(daemon: DaemonProcess, topic: str, wait: float) -> list[bytes]:
    """Subscribe to ``topic/ch`` with a plain socket and collect what arrives within `wait`
    seconds (each message is finished)."""
    sock = socket.create_connection(daemon.tcp_address, timeout=5)
    bodies: list[bytes] = []
    try:
        sock.sendall(b"  V2" + b"SUB %s ch\n" % topic.encode() + b"RDY 100\n")
        buf = b""
        subscribed = False
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                pytest.fail("nsqd closed the checking subscriber's connection")
            buf += data
            while len(buf) >= 8:
                size, frame_type = _HEADER.unpack_from(buf)
                if len(buf) < size + 4:
                    break
                frame, buf = buf[8 : size + 4], buf[size + 4 :]
                if frame_type == 1:
                    pytest.fail(f"error frame to the checking subscriber: {frame!r}")
                if frame_type == 0:
                    if frame == b"OK":
                        subscribed = True
                    elif frame == b"_heartbeat_":
                        sock.sendall(b"NOP\n")
                    continue
                bodies.append(frame[26:])
                sock.sendall(b"FIN " + frame[10:26] + b"\n")
        assert subscribed, "SUB was not answered OK"
    finally:
        sock.close()
    return bodies


def _topic(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def check_pubsub(result: dict) -> None:
    published = result["published"]
    assert len(published) == 2 * COUNT
    bodies = [body for body, _ in result["received"]]
    assert Counter(bodies) == Counter(published), "received bodies differ from those sent"
    assert all(attempts == 1 for _, attempts in result["received"])


def check_requeue(result: dict) -> None:
    published = result["published"]
    assert len(published) == COUNT
    attempts: dict[str, list[int]] = {}
    for body, n in result["received"]:
        attempts.setdefault(body, []).append(n)
    assert set(attempts) == set(published)
    assert attempts.pop("requeue-me") == [1, 2]
    assert all(n == [1] for n in attempts.values()), attempts


@_needs("nsq")
def test_pynsq_writer_and_reader(nsqd: DaemonProcess) -> None:
    topic = _topic("pynsq")
    check_pubsub(run_client("pynsq_client.py", "pubsub", nsqd, topic))
    assert leftover_messages(nsqd, topic, MSG_TIMEOUT + 1.5) == []


@_needs("nsq")
def test_pynsq_requeue_comes_back_with_attempts_2(nsqd: DaemonProcess) -> None:
    topic = _topic("pynsq_req")
    check_requeue(run_client("pynsq_client.py", "requeue", nsqd, topic))
    assert leftover_messages(nsqd, topic, MSG_TIMEOUT + 1.5) == []


@_needs("gnsq")
def test_gnsq_producer_and_consumer(nsqd: DaemonProcess) -> None:
    topic = _topic("gnsq")
    check_pubsub(run_client("gnsq_client.py", "pubsub", nsqd, topic))
    assert leftover_messages(nsqd, topic, MSG_TIMEOUT + 1.5) == []


@_needs("gnsq")
def test_gnsq_requeue_comes_back_with_attempts_2(nsqd: DaemonProcess) -> None:
    topic = _topic("gnsq_req")
    check_requeue(run_client("gnsq_client.py", "requeue", nsqd, topic))
    assert leftover_messages(nsqd, topic, MSG_TIMEOUT + 1.5) == []


@_needs("nsq")
def test_pynsq_reader_discovers_every_nsqd_through_nsqlookupd(tmp_path) -> None:
    topic = _topic("pynsq_lookupd")
    with DaemonProcess("nsqlookupd", env=pythonpath_env()) as lookupd:
        lookupd_tcp = "{}:{}".format(*lookupd.tcp_address)
        for i in range(2):
            (tmp_path / f"n{i}").mkdir()
        nsqds = [
            DaemonProcess(
                "nsqd",
                args=[f"--lookupd-tcp-address={lookupd_tcp}", "--broadcast-address=127.0.0.1"],
                data_path=str(tmp_path / f"n{i}"),
                env=pythonpath_env(),
            )
            for i in range(2)
        ]
        try:
            published = []
            for i, nsqd in enumerate(nsqds):
                bodies = [b"node%d-%d" % (i, n) for n in range(COUNT)]
                sock = socket.create_connection(nsqd.tcp_address, timeout=5)
                payload = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
                body = struct.pack(">i", len(bodies)) + payload
                sock.sendall(
                    b"  V2MPUB %s\n" % topic.encode() + struct.pack(">i", len(body)) + body
                )
                assert sock.recv(64)[8:] == b"OK"
                sock.close()
                published += [b.decode() for b in bodies]
            host, port = lookupd.http_address  # type: ignore[misc]
            proc = subprocess.run(
                [
                    sys.executable,
                    str(CLIENTS / "pynsq_lookupd_client.py"),
                    f"{host}:{port}",
                    topic,
                    str(len(published)),
                    str(SCRIPT_TIMEOUT),
                ],
                capture_output=True,
                text=True,
                timeout=SCRIPT_TIMEOUT + 20,
                env=pythonpath_env(),
                stdin=subprocess.DEVNULL,
            )
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            assert lines, f"no result; stderr:\n{proc.stderr[-4000:]}"
            result = json.loads(lines[-1])
            assert result["ok"], result["error"] + "\n" + proc.stderr[-4000:]
            assert Counter(result["received"]) == Counter(published)
        finally:
            for nsqd in nsqds:
                nsqd.close()


# -- TLS, snappy and deflate with pynsq ------------------------------------------------------


@pytest.fixture
def tls_nsqd(tmp_path: Path) -> Iterator[tuple[DaemonProcess, str]]:
    """nsqd with a trustme certificate (and HTTP, to check channels); yields it and the CA
    file."""
    import trustme

    ca = trustme.CA()
    ca_file = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    pem = str(tmp_path / "server.pem")
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(pem)
    args = [
        f"--msg-timeout={MSG_TIMEOUT:g}s",
        f"--tls-cert={pem}",
        f"--tls-key={pem}",
        "--https-address=127.0.0.1:0",
    ]
    with DaemonProcess("nsqd", args=args, env=pythonpath_env()) as daemon:
        assert daemon.https_address is not None
        yield daemon, ca_file


def assert_channel_drained(daemon: DaemonProcess, topic: str, timeout: float = 5.0) -> None:
    """Every message of ``topic/ch`` finished: none queued, none in flight (an unfinished
    message is one or the other, whether its client is still connected or not)."""
    assert daemon.http_address is not None
    host, port = daemon.http_address
    url = f"http://{host}:{port}/stats?format=json&topic={topic}&channel=ch"
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=5) as response:
            stats = json.load(response)
        channels = [c for t in stats["topics"] for c in t["channels"]]
        assert len(channels) == 1, stats
        channel = channels[0]
        if channel["depth"] == 0 and channel["in_flight_count"] == 0:
            assert channel["message_count"] == 2 * COUNT
            return
        if time.monotonic() > deadline:
            pytest.fail(f"channel not drained: {channel}")
        time.sleep(0.05)


@_needs("nsq")
@pytest.mark.parametrize(
    "features",
    [
        {"tls_v1": True},
        {"snappy": True},
        {"deflate": True, "deflate_level": 1},
        {"tls_v1": True, "snappy": True},
        {"tls_v1": True, "deflate": True, "deflate_level": 9},
    ],
    ids=["tls", "snappy", "deflate", "tls+snappy", "tls+deflate"],
)
def test_pynsq_with_tls_and_compression(tls_nsqd: tuple[DaemonProcess, str], features) -> None:
    daemon, ca_file = tls_nsqd
    topic = _topic("pynsq_" + "_".join(sorted(features)))
    options = dict(features)
    if options.get("tls_v1"):
        options["tls_options"] = {"ca_certs": ca_file}
    result = run_client("pynsq_client.py", "pubsub", daemon, topic, options)
    check_pubsub(result)
    granted = result["features"]
    assert granted["tls_v1"] is bool(features.get("tls_v1"))
    assert granted["snappy"] is bool(features.get("snappy"))
    assert granted["deflate"] is bool(features.get("deflate"))
    if features.get("deflate"):
        assert granted["deflate_level"] == min(features["deflate_level"], 6)
    assert_channel_drained(daemon, topic)
