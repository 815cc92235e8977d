"""Disk faults on a real filesystem: a small tmpfs as nsqd's data path, filled up, then freed.
Needs permission to mount (root with CAP_SYS_ADMIN); skipped otherwise
(tests/integration/test_nsqd_durability.py injects the same faults in process; a read-only
data path stops start-up: test_nsqd_fail_safe.py).

What must hold: a publish the disk refuses answers E_PUB_FAILED (HTTP 503 PUB_FAILED; Go says
EXITING), /ping answers 500 with the health text, messages accepted before are still delivered,
and nsqd recovers when space returns."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx

from tests.conformance.nsq_conn import NSQConn
from tests.small_disk import fill
from trionsq.testing import DaemonProcess


def http_client(daemon: DaemonProcess) -> httpx.Client:
    host, port = daemon.http_address  # type: ignore[misc]
    return httpx.Client(base_url=f"http://{host}:{port}")


def test_a_full_disk_refuses_publishes_keeps_what_it_accepted_and_recovers(
    small_disk: Path,
) -> None:
    topic = f"full-{uuid.uuid4().hex[:8]}"
    args = ["--mem-queue-size=0"]
    with DaemonProcess("nsqd", args=args, data_path=str(small_disk)) as daemon:
        http = http_client(daemon)
        assert http.post(f"/channel/create?topic={topic}&channel=c").status_code == 404
        assert http.post(f"/topic/create?topic={topic}").status_code == 200
        assert http.post(f"/channel/create?topic={topic}&channel=c").status_code == 200
        with NSQConn(daemon.tcp_address) as producer:
            for i in range(20):
                producer.pub(topic, b"accepted %d" % i)
        filler = fill(small_disk)

        with NSQConn(daemon.tcp_address) as producer:
            producer.send(
                b"PUB " + topic.encode() + b"\n" + (5000).to_bytes(4, "big") + b"x" * 5000
            )
            producer.expect_fatal(
                "E_PUB_FAILED", "PUB failed failed to write to disk - No space left on device"
            )
        refused = http.post(f"/pub?topic={topic}", content=b"y" * 5000)
        assert (refused.status_code, refused.json()) == (503, {"message": "PUB_FAILED"})
        ping = http.get("/ping")
        assert ping.status_code == 500
        assert ping.text == "NOK - failed to write to disk - No space left on device"

        with NSQConn(daemon.tcp_address) as consumer:
            consumer.sub(topic, "c")
            consumer.rdy(100)
            messages = consumer.read_messages(20)
            for message in messages:
                consumer.fin(message.id)
            bodies = sorted(bytes(m.body) for m in messages)
        assert bodies == sorted(b"accepted %d" % i for i in range(20))

        os.remove(filler)
        assert http.post(f"/pub?topic={topic}", content=b"after").status_code == 200
        assert (http.get("/ping").status_code, http.get("/ping").text) == (200, "OK")
        assert daemon.terminate() == 0
