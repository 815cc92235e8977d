"""Crash safety: with --mem-queue-size=0 --sync-every=1, kill -9 at a random moment under
publishing and consuming load loses no message that nsqd acknowledged with OK.

Each trial runs a real nsqd process, publishes with one connection (PUB and MPUB, each OK
recorded) while another consumes (finishing most messages, holding some in flight), kills
the process with SIGKILL at a random moment, restarts it on the same data directory and
consumes everything. Every acknowledged message must have been finished before the kill or be
delivered after the restart (duplicates are allowed: delivery is at least once).

    bench/crash-trials 50     # the long version (or: pytest ... --crash-trials 50)
"""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest

from tests.conformance.nsq_conn import ConnectionClosed, NSQConn
from trionsq.protocol import FRAME_TYPE_RESPONSE, mpub, pub
from trionsq.testing import DaemonProcess

CRASH_FLAGS = ["--mem-queue-size=0", "--sync-every=1"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "trial" in metafunc.fixturenames:
        trials = metafunc.config.getoption("crash_trials")
        metafunc.parametrize("trial", range(trials))


class Load:
    """Publisher and consumer threads against one nsqd, recording what was acknowledged,
    finished and left in flight."""

    def __init__(self, address: tuple[str, int], rng: random.Random, tag: str) -> None:
        self.address = address
        self.rng = rng
        self.tag = tag
        self.acked: set[bytes] = set()
        self.finished: set[bytes] = set()
        self.held: set[bytes] = set()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._publish, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)

    def _publish(self) -> None:
        rng = random.Random(self.rng.random())
        n = 0
        try:
            with NSQConn(self.address, timeout=5) as conn:
                while not self.stop.is_set():
                    size = rng.choice([1, 1, 1, 5, 20])
                    bodies = [b"%s-%d" % (self.tag.encode(), n + i) for i in range(size)]
                    n += size
                    conn.send(pub("crash", bodies[0]) if size == 1 else mpub("crash", bodies))
                    frame_type, data = conn.read_frame()
                    if frame_type != FRAME_TYPE_RESPONSE or data != b"OK":
                        return
                    self.acked.update(bodies)
        except (OSError, AssertionError, ConnectionClosed):
            return  # the daemon was killed

    def _consume(self) -> None:
        rng = random.Random(self.rng.random())
        try:
            with NSQConn(self.address, timeout=5) as conn:
                conn.sub("crash", "c")
                conn.rdy(50)
                while not self.stop.is_set():
                    message = conn.try_read_message(0.2)
                    if message is None:
                        continue
                    body = bytes(message.body)
                    if rng.random() < 0.1:
                        self.held.add(body)  # stays in flight until the kill
                    else:
                        conn.fin(message.id)
                        self.finished.add(body)
        except (OSError, AssertionError, ConnectionClosed):
            return


def drain(address: tuple[str, int], expected: set[bytes], idle: float = 3.0) -> set[bytes]:
    """Consume and finish everything until `expected` has all arrived and nothing more comes
    for a moment (or for `idle` seconds once nothing arrives)."""
    received: set[bytes] = set()
    with NSQConn(address, timeout=10) as conn:
        conn.sub("crash", "c")
        conn.rdy(500)
        quiet_since = time.monotonic()
        while True:
            message = conn.try_read_message(0.1)
            now = time.monotonic()
            if message is not None:
                received.add(bytes(message.body))
                conn.fin(message.id)
                quiet_since = now
                continue
            waited = now - quiet_since
            if (expected <= received and waited > 0.3) or waited > idle:
                return received


def test_kill_9_under_load_loses_no_acknowledged_message(tmp_path, trial: int) -> None:
    rng = random.Random(trial * 7919 + 1)
    data_path = str(tmp_path)
    with DaemonProcess("nsqd", args=CRASH_FLAGS, data_path=data_path) as daemon:
        host, port = daemon.http_address  # type: ignore[misc]
        with httpx.Client(base_url=f"http://{host}:{port}") as http:
            assert http.post("/topic/create?topic=crash").status_code == 200
            assert http.post("/channel/create?topic=crash&channel=c").status_code == 200
        load = Load(daemon.tcp_address, rng, f"t{trial}")
        load.start()
        time.sleep(rng.uniform(0.2, 1.0))
        daemon.kill()
        load.join()
    assert len(load.acked) > 10, "the publisher got too few OKs for a meaningful trial"
    with DaemonProcess("nsqd", args=CRASH_FLAGS, data_path=data_path) as daemon:
        owed = load.acked - load.finished
        received = drain(daemon.tcp_address, owed)
        assert daemon.terminate() == 0
    lost = owed - received
    assert not lost, (
        f"{len(lost)} of {len(load.acked)} acknowledged messages lost "
        f"(held in flight at the kill: {len(load.held)}), e.g. {sorted(lost)[:5]}"
    )
    assert load.held <= received  # in-flight messages come back after a crash
