"""The bundled apps end to end: tail, to_nsq, to_file, to_http and nsq_to_nsq run as
`python -m trionsq <app>` processes against real trionsq nsqds."""

from __future__ import annotations

import gzip
import http.server
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trionsq.client import Consumer
from trionsq.testing import DaemonProcess, pythonpath_env


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def tcp(nsqd: DaemonProcess) -> str:
    return "{}:{}".format(*nsqd.tcp_address)


def http_base(nsqd: DaemonProcess) -> str:
    return "http://{}:{}".format(*nsqd.http_address)  # type: ignore[misc]


def publish(nsqd: DaemonProcess, topic: str, bodies: list[bytes]) -> None:
    for body in bodies:
        response = httpx.post(f"{http_base(nsqd)}/pub?topic={topic}", content=body)
        assert response.status_code == 200, response.text


def channel_stats(nsqd: DaemonProcess, topic: str, channel: str) -> dict[str, Any] | None:
    data = httpx.get(f"{http_base(nsqd)}/stats?format=json&topic={topic}").json()
    for t in data.get("topics") or []:
        if t["topic_name"] == topic:
            for c in t.get("channels") or []:
                if c["channel_name"] == channel:
                    return c  # type: ignore[no-any-return]
    return None


def drained(nsqd: DaemonProcess, topic: str, channel: str, total: int) -> bool:
    c = channel_stats(nsqd, topic, channel)
    return (
        c is not None
        and c["message_count"] >= total
        and c["depth"] == 0
        and c["in_flight_count"] == 0
        and c["deferred_count"] == 0
    )


def consume(address: str, topic: str, n: int, timeout: float = 10.0) -> list[bytes]:
    async def main() -> list[bytes]:
        got: list[bytes] = []
        with trio.fail_after(timeout):
            async with Consumer(
                topic, "check", nsqd_tcp_addresses=[address], max_in_flight=100
            ) as consumer:
                async for message in consumer:
                    got.append(message.body)
                    message.finish()
                    if len(got) >= n:
                        break
        return got

    return trio.run(main)


def app(*args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "trionsq", *args],
        env=pythonpath_env(),
        stdout=kwargs.pop("stdout", subprocess.PIPE),
        stderr=subprocess.PIPE,
        **kwargs,
    )


def stop(proc: subprocess.Popen[bytes]) -> tuple[int, bytes]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err


@pytest.fixture(scope="module")
def nsqds() -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    with DaemonProcess("nsqd") as a, DaemonProcess("nsqd") as b:
        yield a, b


def test_tail_prints_n_messages_and_exits(nsqds: tuple[DaemonProcess, DaemonProcess]) -> None:
    nsqd = nsqds[0]
    publish(nsqd, "tail_t", [b"m%d" % i for i in range(5)])
    proc = app("tail", "--topic=tail_t", f"--nsqd-tcp-address={tcp(nsqd)}", "-n", "3")
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.splitlines() == [b"m0", b"m1", b"m2"]
    assert not any(b"\r" in line for line in err.splitlines())  # no progress off a TTY

    proc = app(
        "nsq_tail",
        "--topic=tail_t",
        "--topic=tail_u",
        f"--nsqd-tcp-address={tcp(nsqd)}",
        "--print-topic",
        "--n=2",
        "--channel=fixed",
    )
    time.sleep(0.5)
    publish(nsqd, "tail_u", [b"u1", b"u2"])
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.splitlines() == [b"tail_u | u1", b"tail_u | u2"]


def test_to_nsq_publishes_stdin_records_to_every_nsqd(
    nsqds: tuple[DaemonProcess, DaemonProcess],
) -> None:
    a, b = nsqds
    proc = app(
        "to_nsq",
        "--topic=stdin_t",
        f"--nsqd-tcp-address={tcp(a)}",
        f"--nsqd-tcp-address={tcp(b)}",
        stdin=subprocess.PIPE,
    )
    _, err = proc.communicate(b"one\ntwo\n\nthree", timeout=20)
    assert proc.returncode == 0, err
    for nsqd in (a, b):
        assert consume(tcp(nsqd), "stdin_t", 3) == [b"one", b"two", b"three"]

    proc = app(
        "to_nsq",
        "--topic=stdin_rate",
        "--delimiter=,",
        "--rate=50",
        f"--nsqd-tcp-address={tcp(a)}",
        stdin=subprocess.PIPE,
    )
    _, err = proc.communicate(b"x,y,z,", timeout=20)
    assert proc.returncode == 0, err
    assert consume(tcp(a), "stdin_rate", 3) == [b"x", b"y", b"z"]


@pytest.mark.parametrize("gzipped", [False, True])
def test_to_file_writes_rotates_and_moves_files(
    nsqds: tuple[DaemonProcess, DaemonProcess], tmp_path: Path, gzipped: bool
) -> None:
    nsqd = nsqds[0]
    topic = f"file_t{int(gzipped)}"
    bodies = [b"message-%02d" % i for i in range(10)]
    publish(nsqd, topic, bodies)
    out_dir, work_dir = tmp_path / "out", tmp_path / "work"
    args = [
        "to_file",
        f"--topic={topic}",
        f"--nsqd-tcp-address={tcp(nsqd)}",
        f"--output-dir={out_dir}",
        f"--work-dir={work_dir}",
        "--rotate-size=30",
        "--sync-interval=200ms",
        "--host-identifier=host",
    ]
    if gzipped:
        args.append("--gzip")
    proc = app(*args)
    try:
        wait_for(lambda: drained(nsqd, topic, "nsq_to_file", len(bodies)), timeout=15)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    files = sorted(out_dir.iterdir())
    assert len(files) >= 3, files  # 12 bytes a line, rotated past 30 bytes
    assert not list(work_dir.iterdir())
    lines = []
    for path in files:
        assert path.name.startswith(f"{topic}.host-00000")
        data = path.read_bytes()
        if gzipped:
            assert path.name.endswith(".log.gz")
            data = gzip.decompress(data)
        else:
            assert path.name.endswith(".log")
        lines += data.splitlines()
    assert sorted(lines) == bodies


class _Recorder(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, str, bytes, str]] = []
    fail: set[bytes] = set()

    def _answer(self, body: bytes) -> None:
        self.requests.append((self.command, self.path, body, self.headers.get("Content-Type", "")))
        key = body or urllib.parse.urlsplit(self.path).query.encode()
        status = 200
        if key in self.fail:
            self.fail.discard(key)
            status = 500
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self._answer(self.rfile.read(length))

    def log_message(self, *args: Any) -> None:
        pass


def test_to_http_posts_and_gets_with_retry_on_500(
    nsqds: tuple[DaemonProcess, DaemonProcess],
) -> None:
    nsqd = nsqds[0]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    _Recorder.requests = []
    _Recorder.fail = {b"p2"}
    try:
        publish(nsqd, "http_p", [b"p1", b"p2", b"p3"])
        proc = app(
            "to_http",
            "--topic=http_p",
            f"--nsqd-tcp-address={tcp(nsqd)}",
            f"--post={base}/post",
            "--content-type=text/plain",
            "--consumer-opt=default_requeue_delay,0s",
            "--consumer-opt=backoff_multiplier,10ms",
        )
        try:
            wait_for(lambda: drained(nsqd, "http_p", "nsq_to_http", 3), timeout=15)
        finally:
            code, err = stop(proc)
        assert code == 0, err
        posts = [r for r in _Recorder.requests if r[0] == "POST"]
        assert sorted(r[2] for r in posts) == [b"p1", b"p2", b"p2", b"p3"]  # p2 retried
        assert {r[3] for r in posts} == {"text/plain"}
        assert {r[1] for r in posts} == {"/post"}

        _Recorder.requests = []
        _Recorder.fail = set()
        publish(nsqd, "http_g", [b"a b&c"])
        proc = app(
            "nsq_to_http",
            "--topic=http_g",
            f"--nsqd-tcp-address={tcp(nsqd)}",
            f"--get={base}/get?d=%s",
            "--mode=round-robin",
        )
        try:
            wait_for(lambda: drained(nsqd, "http_g", "nsq_to_http", 1), timeout=15)
        finally:
            code, err = stop(proc)
        assert code == 0, err
        assert [(r[0], r[1]) for r in _Recorder.requests] == [("GET", "/get?d=a+b%26c")]
    finally:
        server.shutdown()
        server.server_close()


def test_nsq_to_nsq_relays_between_nsqds(nsqds: tuple[DaemonProcess, DaemonProcess]) -> None:
    source, destination = nsqds
    publish(source, "relay_src", [b'{"a":1,"b":"x"}', b'{"b":"y"}', b"not json", b'{"a":2}'])
    proc = app(
        "nsq_to_nsq",
        "--topic=relay_src",
        f"--nsqd-tcp-address={tcp(source)}",
        f"--destination-nsqd-tcp-address={tcp(destination)}",
        "--destination-topic=relay_dst",
        "--require-json-field=a",
        "--whitelist-json-field=a",
        "--mode=round-robin",
    )
    try:
        wait_for(lambda: drained(source, "relay_src", "nsq_to_nsq", 4), timeout=15)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert sorted(consume(tcp(destination), "relay_dst", 2)) == [b'{"a":1}', b'{"a":2}']


def test_apps_reject_bad_flags() -> None:
    for args, code in (
        (["tail", "--topic=t"], 1),
        (["to_nsq", "--topic=t"], 1),
        (["to_file", "--nsqd-tcp-address=x:1"], 1),
        (["to_http", "--topic=t", "--nsqd-tcp-address=x:1"], 1),
        (["nsq_to_nsq", "--topic=t", "--nsqd-tcp-address=x:1"], 1),
        (["to_file", "--no-such-flag"], 2),
    ):
        proc = app(*args)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == code, (args, err)
        assert len(err.decode().strip().splitlines()) == 1, err
