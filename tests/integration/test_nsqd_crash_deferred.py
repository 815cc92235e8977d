"""Crash safety of deferred messages: with --mem-queue-size=0 --sync-every=1, kill -9 under a
load of PUB, MPUB and DPUB while a consumer finishes most messages, requeues some with a delay
(REQ) and holds some in flight; after the restart every acknowledged message comes back, and
none before its due time: a DPUB's defer, or the delay of a REQ nsqd had processed.

A REQ has no answer: the consumer follows each with a PUB on the same connection, whose OK
proves nsqd executed the REQ before it. Trials alternate between the channel existing before
the load and the channel being created by the consumer's SUB (DPUBs then wait in the topic).

    bench/crash-trials 50     # also runs these trials 50 times
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque

import httpx
import pytest

from tests.conformance.nsq_conn import ConnectionClosed, NSQConn
from trionsq.protocol import (
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    decode_message,
    dpub,
    mpub,
    pub,
)
from trionsq.testing import DaemonProcess

CRASH_FLAGS = ["--mem-queue-size=0", "--sync-every=1"]
TOPIC, CHANNEL, MARKERS = "deferred", "c", "deferred-markers"
#: Clock tolerance between this process's time and nsqd's (same machine: resolution only).
TOLERANCE = 0.02


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "trial" in metafunc.fixturenames:
        trials = metafunc.config.getoption("crash_trials")
        metafunc.parametrize("trial", range(trials))


class DeferredLoad:
    """A publisher (PUB, MPUB, DPUB) and a consumer (FIN, REQ with a delay, hold) against one
    nsqd, recording what was acknowledged and each message's earliest allowed delivery."""

    def __init__(self, address: tuple[str, int], rng: random.Random, tag: str) -> None:
        self.address = address
        self.rng = rng
        self.tag = tag
        self.acked: set[bytes] = set()
        self.finished: set[bytes] = set()
        #: Body -> wall time before which it must not be delivered (DPUB, confirmed REQ).
        self.not_before: dict[bytes, float] = {}
        self.deferred_published = 0
        self.requeued = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
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
                    kind = rng.choice(["pub", "mpub", "dpub", "dpub"])
                    count = 5 if kind == "mpub" else 1
                    bodies = [b"%s-%d" % (self.tag.encode(), n + i) for i in range(count)]
                    n += count
                    defer_ms = rng.randint(2000, 6000)
                    sent_at = time.time()
                    if kind == "dpub":
                        conn.send(dpub(TOPIC, defer_ms, bodies[0]))
                    elif kind == "mpub":
                        conn.send(mpub(TOPIC, bodies))
                    else:
                        conn.send(pub(TOPIC, bodies[0]))
                    if conn.read_frame() != (FRAME_TYPE_RESPONSE, b"OK"):
                        return
                    with self.lock:
                        if kind == "dpub":
                            self.not_before[bodies[0]] = sent_at + defer_ms / 1000
                            self.deferred_published += 1
                        self.acked.update(bodies)
        except (OSError, AssertionError, ConnectionClosed):
            return  # the daemon was killed

    def _consume(self) -> None:
        rng = random.Random(self.rng.random())
        # REQs sent and not yet confirmed by the OK of the PUB that follows each.
        unconfirmed: deque[tuple[bytes, float]] = deque()
        try:
            with NSQConn(self.address, timeout=5) as conn:
                conn.sub(TOPIC, CHANNEL)
                conn.rdy(50)
                while not self.stop.is_set():
                    try:
                        frame_type, data = conn.read_frame(0.2)
                    except TimeoutError:
                        continue
                    if frame_type == FRAME_TYPE_RESPONSE:
                        body, due = unconfirmed.popleft()
                        with self.lock:
                            self.not_before[body] = due
                            self.requeued += 1
                        continue
                    assert frame_type == FRAME_TYPE_MESSAGE, (frame_type, data)
                    message = decode_message(data)
                    body = bytes(message.body)
                    with self.lock:
                        self.not_before.pop(body, None)  # delivered: any bound was met
                    roll = rng.random()
                    if roll < 0.1:
                        continue  # held in flight until the kill
                    if roll < 0.3:
                        delay_ms = rng.randint(2000, 5000)
                        unconfirmed.append((body, time.time() + delay_ms / 1000))
                        conn.req(message.id, delay_ms)
                        conn.send(pub(MARKERS, b"req"))
                    else:
                        conn.fin(message.id)
                        with self.lock:
                            self.finished.add(body)
        except (OSError, AssertionError, ConnectionClosed):
            return


def drain_with_times(
    address: tuple[str, int], expected: set[bytes], deadline: float
) -> dict[bytes, float]:
    """Consume and finish until everything expected arrived (or `deadline`, wall time);
    returns each body's first arrival time."""
    arrived: dict[bytes, float] = {}
    with NSQConn(address, timeout=10) as conn:
        conn.sub(TOPIC, CHANNEL)
        conn.rdy(500)
        while time.time() < deadline and not expected <= arrived.keys():
            message = conn.try_read_message(0.1)
            if message is not None:
                arrived.setdefault(bytes(message.body), time.time())
                conn.fin(message.id)
    return arrived


def test_kill_9_keeps_acknowledged_deferred_messages_and_their_due_times(
    tmp_path, trial: int
) -> None:
    rng = random.Random(trial * 104729 + 7)
    data_path = str(tmp_path)
    channel_first = trial % 2 == 0
    with DaemonProcess("nsqd", args=CRASH_FLAGS, data_path=data_path) as daemon:
        host, port = daemon.http_address  # type: ignore[misc]
        with httpx.Client(base_url=f"http://{host}:{port}") as http:
            assert http.post(f"/topic/create?topic={TOPIC}").status_code == 200
            if channel_first:
                url = f"/channel/create?topic={TOPIC}&channel={CHANNEL}"
                assert http.post(url).status_code == 200
        load = DeferredLoad(daemon.tcp_address, rng, f"d{trial}")
        load.start()
        time.sleep(rng.uniform(0.8, 1.8))
        daemon.kill()
        load.join()
    assert load.deferred_published > 5, "too few DPUBs acknowledged for a meaningful trial"
    assert load.requeued > 0, "no REQ was confirmed before the kill"
    owed = load.acked - load.finished
    latest = max(load.not_before.values(), default=time.time())
    with DaemonProcess("nsqd", args=CRASH_FLAGS, data_path=data_path) as daemon:
        restarted = time.time()
        arrived = drain_with_times(daemon.tcp_address, owed, max(latest, restarted) + 10)
        assert daemon.terminate() == 0
    lost = owed - arrived.keys()
    assert not lost, (
        f"{len(lost)} of {len(load.acked)} acknowledged messages lost "
        f"({load.deferred_published} DPUBs, {load.requeued} confirmed REQs), "
        f"e.g. {sorted(lost)[:5]}"
    )
    early = {
        body: (round(due - arrived[body], 3))
        for body, due in load.not_before.items()
        if body in arrived and arrived[body] < due - TOLERANCE
    }
    assert not early, f"delivered before their due time (seconds early): {early}"
    still_deferred = [due for due in load.not_before.values() if due > restarted]
    # the trial tested due times that outlived the restart, not only ones already past
    assert still_deferred, "no deferred message was due after the restart"
