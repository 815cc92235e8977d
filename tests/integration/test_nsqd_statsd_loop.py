"""nsqd's statsd loop in the daemon: packets arrive at a UDP listener."""

from __future__ import annotations

import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.protocol import pub


async def test_statsd_packets_reach_a_udp_listener(nursery, tmp_path, autojump_clock):
    listener = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    nsqd = await start_nsqd(
        nursery,
        str(tmp_path),
        statsd_address=f"127.0.0.1:{port}",
        statsd_prefix="nsq.test.",
        statsd_interval=5.0,
    )
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x") + pub("t", b"y"))
    assert [await producer.response(), await producer.response()] == [b"OK", b"OK"]
    lines: list[str] = []
    with trio.fail_after(30):
        while "nsq.test.topic.t.message_count:2|c" not in lines:
            packet = await listener.recv(65536)
            lines += packet.decode().splitlines()
    assert "nsq.test.topic.t.depth:2|g" in lines
    assert any(line.startswith("nsq.test.mem.heap_objects:") for line in lines)
    listener.close()
