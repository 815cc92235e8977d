"""Jepsen-style trials of a replicated topic (docs/replication.md): three real nsqd processes
and an nsqlookupd, a publisher (to any member: replicas forward to the primary), our consumer
(connected to every member, as a client listing them all in ``nsqd_tcp_addresses``) and an
unmodified pynsq Reader (finding the primary through nsqlookupd), then ``kill -9`` of the
topic's primary at a random moment, its restart on the same data directory (it must come back
as a replica of the new epoch), more load, and a drain. Every acknowledged message must be
consumed at least once on both channels; a monitor polling every member's /stats must never
see two primaries in one epoch.

    bench/replication-trials 20      # the long run (or: pytest ... --replication-trials 20)

Each trial's figures (failover time from the kill to the first delivery after it, duplicates)
are printed, and collected by bench/replication.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from spec import trace_check
from tests.conformance.nsq_conn import ConnectionClosed, NSQConn
from trionsq.protocol import FRAME_TYPE_RESPONSE, mpub, pub
from trionsq.testing import DaemonProcess, free_ports, pythonpath_env

CLIENTS = Path(__file__).parent / "clients"
TOPIC = "rk"
SECRET = "trial-secret"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "trial" in metafunc.fixturenames:
        trials = metafunc.config.getoption("replication_trials")
        metafunc.parametrize("trial", range(trials))


class Member:
    """One nsqd of the replica set, restartable on the same ports and data directory."""

    def __init__(self, index: int, root: Path, ports: list[tuple[int, int]], lookupd: str):
        self.index = index
        self.tcp, self.http = ports[index]
        self.data = root / f"n{index + 1}"
        self.data.mkdir()
        self.trace = root / f"n{index + 1}.trace"
        peers = [f"--replicate-to=127.0.0.1:{t}" for j, (t, _) in enumerate(ports) if j != index]
        self.args = [
            f"--node-id={index + 1}",
            f"--tcp-address=127.0.0.1:{self.tcp}",
            f"--http-address=127.0.0.1:{self.http}",
            "--broadcast-address=127.0.0.1",
            f"--lookupd-tcp-address={lookupd}",
            f"--replicate-topic={TOPIC}",
            f"--replication-secret={SECRET}",
            "--msg-timeout=3s",
            # checked against the spec at the end (spec/trace_check.py)
            f"--replication-trace-file={self.trace}",
            *peers,
        ]
        self.process: DaemonProcess | None = None
        self.logs: list[str] = []

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.tcp)

    def start(self) -> None:
        self.process = DaemonProcess(
            "nsqd", args=self.args, data_path=str(self.data), env=pythonpath_env()
        )

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.logs += self.process.stderr_lines
            self.process.close()
            self.process = None

    def replication(self) -> dict[str, Any] | None:
        if self.process is None:
            return None
        try:
            r = httpx.get(
                f"http://127.0.0.1:{self.http}/stats?format=json&topic={TOPIC}", timeout=1
            )
            for topic in r.json().get("topics") or []:
                if topic["topic_name"] == TOPIC:
                    return topic.get("replication")
        except (httpx.HTTPError, ValueError):
            return None
        return None


class Trial:
    """The load and the observers of one trial."""

    def __init__(self, members: list[Member], rng: random.Random, tag: str) -> None:
        self.members = members
        self.rng = rng
        self.tag = tag
        self.acked: set[bytes] = set()
        #: Messages acknowledged through each member (a replica forwarded them), and the
        #: publishes that failed.
        self.acked_via = [0] * len(members)
        self.failures = 0
        #: (time, member index, body) of every delivery to channel c
        self.received: list[tuple[float, int, bytes]] = []
        self.finished: set[bytes] = set()
        self.lock = threading.Lock()
        self.stop_load = threading.Event()
        self.stop_all = threading.Event()
        self.violations: list[str] = []
        self.primaries_seen: set[tuple[int, int]] = set()
        self.threads = [threading.Thread(target=self._publish, daemon=True)]
        self.threads += [
            threading.Thread(target=self._consume, args=(m,), daemon=True) for m in members
        ]
        self.threads.append(threading.Thread(target=self._monitor, daemon=True))

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop_load.set()
        self.stop_all.set()
        for thread in self.threads:
            thread.join(10)

    def _publish(self) -> None:
        """Any member takes PUBs (a replica forwards them to the primary): each connection
        goes to a member at random, and after a failure (the member was killed, or a forward
        failed during the takeover: fatal E_PUB_FAILED) the publisher reconnects to another
        one at random, as a producer with several nsqd addresses would."""
        rng = random.Random(self.rng.random())
        n = 0
        while not self.stop_load.is_set():
            member = rng.choice(self.members)
            try:
                with NSQConn(member.address, timeout=15) as conn:
                    while not self.stop_load.is_set():
                        size = rng.choice([1, 1, 1, 5, 20])
                        bodies = [b"%s-%d" % (self.tag.encode(), n + i) for i in range(size)]
                        n += size
                        conn.send(pub(TOPIC, bodies[0]) if size == 1 else mpub(TOPIC, bodies))
                        frame_type, data = conn.read_frame()
                        if frame_type != FRAME_TYPE_RESPONSE or data != b"OK":
                            self.failures += 1
                            break
                        with self.lock:
                            self.acked.update(bodies)
                            self.acked_via[member.index] += len(bodies)
            except (OSError, AssertionError, ConnectionClosed, TimeoutError):
                self.failures += 1
            time.sleep(0.05)

    def _consume(self, member: Member) -> None:
        rng = random.Random(self.rng.random())
        held_once: set[bytes] = set()
        while not self.stop_all.is_set():
            try:
                with NSQConn(member.address, timeout=5) as conn:
                    conn.sub(TOPIC, "c")
                    conn.rdy(200)
                    while not self.stop_all.is_set():
                        message = conn.try_read_message(0.2)
                        if message is None:
                            continue
                        body = bytes(message.body)
                        with self.lock:
                            self.received.append((time.monotonic(), member.index, body))
                        if body not in held_once and rng.random() < 0.01:
                            held_once.add(body)  # in flight until it times out (or a kill)
                            continue
                        conn.fin(message.id)
                        with self.lock:
                            self.finished.add(body)
            except (OSError, AssertionError, ConnectionClosed, TimeoutError):
                time.sleep(0.1)

    def _monitor(self) -> None:
        while not self.stop_all.is_set():
            primaries = []
            for member in self.members:
                info = member.replication()
                if info and info["role"] == "primary":
                    primaries.append((member.index, info["epoch"]))
            epochs = [e for _, e in primaries]
            if len(epochs) != len(set(epochs)):
                self.violations.append(f"two primaries in one epoch: {primaries}")
            self.primaries_seen.update(primaries)
            time.sleep(0.1)

    def primary(self) -> Member | None:
        for member in self.members:
            info = member.replication()
            if info and info["role"] == "primary":
                return member
        return None


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill_9_of_the_primary_loses_no_acknowledged_message(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial * 104729 + 7)
    flat = free_ports(6)
    ports = [(flat[2 * i], flat[2 * i + 1]) for i in range(3)]
    done_file = tmp_path / "done"
    with DaemonProcess("nsqlookupd", env=pythonpath_env()) as lookupd:
        lookupd_tcp = f"127.0.0.1:{lookupd.tcp_address[1]}"
        lookupd_http = f"127.0.0.1:{lookupd.http_address[1]}"  # type: ignore[index]
        members = [Member(i, tmp_path, ports, lookupd_tcp) for i in range(3)]
        try:
            for member in members:
                member.start()
            first = members[rng.randrange(3)]
            httpx.post(f"http://127.0.0.1:{first.http}/topic/create?topic={TOPIC}", timeout=5)
            trial_state = Trial(members, rng, f"t{trial}")
            primary = wait_for(trial_state.primary, 15, "a primary")
            r = httpx.post(
                f"http://127.0.0.1:{primary.http}/channel/create?topic={TOPIC}&channel=c",
                timeout=5,
            )
            assert r.status_code == 200
            httpx.post(
                f"http://127.0.0.1:{primary.http}/channel/create?topic={TOPIC}&channel=py",
                timeout=5,
            )
            reader = subprocess.Popen(
                [
                    sys.executable,
                    str(CLIENTS / "pynsq_failover_client.py"),
                    lookupd_http,
                    TOPIC,
                    "py",
                    str(done_file),
                    "90",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=pythonpath_env(),
            )
            try:
                trial_state.start()
                time.sleep(rng.uniform(0.5, 2.0))
                victim = wait_for(trial_state.primary, 10, "the primary")
                with trial_state.lock:
                    acked_at_kill = len(trial_state.acked)
                killed_at = time.monotonic()
                victim.kill()
                successor = wait_for(
                    lambda: (p := trial_state.primary()) is not None and p is not victim and p,
                    15,
                    "a new primary",
                )
                took_over = time.monotonic() - killed_at
                time.sleep(rng.uniform(0.5, 1.5))
                victim.start()
                wait_for(
                    lambda: (
                        (info := victim.replication()) is not None
                        and info["role"] == "replica"
                        and info["epoch"] == (successor.replication() or {}).get("epoch")
                    ),
                    15,
                    "the old primary to rejoin as a replica",
                )
                time.sleep(0.5)
                trial_state.stop_load.set()
                time.sleep(0.3)
                with trial_state.lock:
                    acked = set(trial_state.acked)

                def drained() -> bool:
                    with trial_state.lock:
                        return acked <= {b for _, _, b in trial_state.received}

                try:
                    wait_for(drained, 30, "every acknowledged message to be consumed")
                except AssertionError:
                    for m in members:  # reported below with the lost messages
                        try:
                            r = httpx.get(f"http://127.0.0.1:{m.http}/stats?format=json", timeout=2)
                            print("STATS", m.index, json.dumps(r.json()["topics"])[:3000])
                        except httpx.HTTPError:
                            pass
                trial_state.join()
                done_file.write_text("done")
                out, _ = reader.communicate(timeout=60)
            finally:
                trial_state.stop_all.set()
                if reader.poll() is None:
                    reader.kill()
                    reader.wait()
        finally:
            for member in members:
                member.kill()
                (tmp_path / f"n{member.index + 1}.log").write_text("".join(member.logs))
    received = [b for _, _, b in trial_state.received]
    # The first delivery by another member after the kill (the victim's last messages may
    # still be read from the socket afterwards).
    after_kill = [
        t for t, index, _ in trial_state.received if t > killed_at and index != victim.index
    ]
    first_after = (min(after_kill) - killed_at) if after_kill else None
    duplicates = len(received) - len(set(received))
    py_received = [s.encode() for s in json.loads(out.strip().splitlines()[-1])["received"]]
    figures = {
        "acked": len(acked),
        "acked_at_kill": acked_at_kill,
        "took_over_s": round(took_over, 3),
        "first_delivery_after_kill_s": None if first_after is None else round(first_after, 3),
        "deliveries": len(received),
        "redelivered": duplicates,
        "pynsq_deliveries": len(py_received),
        "pynsq_redelivered": len(py_received) - len(set(py_received)),
        "acked_via_member": trial_state.acked_via,
        "publish_failures": trial_state.failures,
    }
    print("REPLICATION-TRIAL " + json.dumps(figures))
    assert acked_at_kill > 10, "too few acknowledgements before the kill for a meaningful trial"
    assert not trial_state.violations, trial_state.violations
    assert len(acked) > acked_at_kill, "publishing did not resume after the takeover"
    lost = acked - set(received)
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
    )
    py_lost = acked - set(py_received)
    assert not py_lost, (
        f"pynsq: {len(py_lost)} of {len(acked)} acknowledged messages never delivered, "
        f"e.g. {sorted(py_lost)[:5]}"
    )
    # Every member's steps, replayed against the spec (the traces of the kill -9 included).
    report = trace_check.check_files([m.trace for m in members])
    print(report.summary())
    assert report.ok, report.summary()
    assert report.counts["take_office"] >= 2, "the trace shows no takeover"
