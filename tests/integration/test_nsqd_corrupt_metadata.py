"""nsqd started on a data directory whose disk-queue metadata no queue can have: the process
answers /ping and TCP as it does on a sound directory, says in one line per queue what it
corrected, and delivers every message the segments hold. The inputs are the ones the issue
and the fuzzer found (a write file number far ahead of the read file hung start-up, walking
a hundred million missing segment files on the event loop and logging a line for each)."""

from __future__ import annotations

import json
import os
import struct

import httpx
import pytest

from tests.conformance.nsq_conn import NSQConn
from trionsq.protocol.message import encode_message
from trionsq.testing import DaemonProcess

TOPIC, CHANNEL = "t", "c"
BODIES = [b"body-%d" % i for i in range(5)]

CORRUPTIONS = {
    # The input: a write file far ahead of the read file.
    "write_file_far_ahead": "5\n0,0\n100000000,0\n",
    "beyond_int64": "5\n0,0\n99999999999999999999999,0\n",
    "read_past_write": "5\n3,0\n0,0\n",
    "read_pos_beyond_file": "5\n0,99999999\n0,{size}\n",
    "write_pos_beyond_file": "5\n0,0\n0,99999999\n",
    "negative_positions": "5\n-1,0\n0,-7\n",
}


def _write_data_dir(path: str, meta: str) -> None:
    """nsqd.dat naming the topic and channel, the channel's queue in one segment holding
    `BODIES`, and the corrupt metadata beside it."""
    with open(os.path.join(path, "nsqd.dat"), "w") as f:
        json.dump(
            {
                "version": "1.3.0",
                "topics": [
                    {"name": TOPIC, "paused": False, "channels": [{"name": CHANNEL}]},
                ],
            },
            f,
        )
    segment = b""
    for i, body in enumerate(BODIES):
        message = encode_message(b"%016x" % i, 1_700_000_000_000_000_000 + i, 1, body)
        segment += struct.pack(">I", len(message)) + message
    queue = f"{TOPIC}:{CHANNEL}"
    with open(os.path.join(path, f"{queue}.diskqueue.000000.dat"), "wb") as f:
        f.write(segment)
    with open(os.path.join(path, f"{queue}.diskqueue.meta.dat"), "w") as f:
        f.write(meta.format(size=len(segment)))


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_nsqd_starts_and_serves_every_readable_message(tmp_path, kind: str) -> None:
    _write_data_dir(str(tmp_path), CORRUPTIONS[kind])
    # DaemonProcess waits for the listeners; the bug never got there.
    with DaemonProcess("nsqd", data_path=str(tmp_path), startup_timeout=30) as daemon:
        http = daemon.http_address
        assert http is not None
        assert httpx.get(f"http://{http[0]}:{http[1]}/ping", timeout=10).text == "OK"
        received = []
        with NSQConn(daemon.tcp_address, timeout=10) as conn:
            conn.sub(TOPIC, CHANNEL)
            conn.rdy(100)
            while len(received) < len(BODIES):
                message = conn.try_read_message(10)
                assert message is not None, f"only {received} arrived"
                received.append(bytes(message.body))
                conn.fin(message.id)
        assert daemon.terminate() == 0
    assert sorted(received) == sorted(BODIES)
    recovery = [line for line in daemon.stderr_lines if "recovery" in line]
    assert recovery, daemon.stderr_lines
    # One line for the corrected queue, not one per segment number walked.
    assert len(daemon.stderr_lines) < 40, daemon.stderr_lines[:40]
