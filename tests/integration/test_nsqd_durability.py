"""nsqd's durability, in process: disk queues behind topics and channels, --mem-queue-size
(including 0), nsqd.dat, and what an ordered shutdown and a restart keep."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct

import pytest
import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.diskqueue.fs import LocalFileSystem
from trionsq.nsqd.nsqd import NSQD, StartupError
from trionsq.nsqd.options import NSQDOptions
from trionsq.protocol import dpub, fin, mpub, pub, req
from trionsq.protocol.message import encode_message


async def stop(nsqd: NSQD) -> None:
    nsqd.request_exit()
    await nsqd.wait_exited()


async def restart(nursery: trio.Nursery, nsqd: NSQD, data_path: str, **overrides: object) -> NSQD:
    await stop(nsqd)
    return await start_nsqd(nursery, data_path, **overrides)


async def publish(nsqd: NSQD, topic: str, bodies: list[bytes]) -> None:
    producer = await Conn.open(nsqd)
    await producer.send(mpub(topic, bodies))
    assert await producer.response() == b"OK"
    await producer.aclose()


def read_nsqd_dat(data_path: str) -> dict[str, object]:
    with open(os.path.join(data_path, "nsqd.dat")) as f:
        return json.load(f)


# -- the disk queue behind topics and channels ----------------------------------------------


async def test_mem_queue_size_0_writes_every_message_to_disk_before_ok(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    await publish(nsqd, "t", [b"one", b"two"])
    topic = nsqd.topics["t"]
    assert (len(topic.memory), topic.backend.depth) == (0, 2)
    segment = tmp_path / "t.diskqueue.000000.dat"
    data = segment.read_bytes()
    # two records, [4-byte length][26-byte header + body], before PUB's OK
    (first,) = struct.unpack_from(">I", data)
    assert first == 26 + 3 and data[4 + 26 : 4 + first] == b"one"
    assert len(data) == (4 + 26 + 3) * 2


async def test_overflow_beyond_mem_queue_size_goes_to_the_topics_disk_queue(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=3)
    await publish(nsqd, "t", [b"%d" % i for i in range(10)])
    topic = nsqd.topics["t"]
    assert (len(topic.memory), topic.backend.depth, topic.depth) == (3, 7, 10)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    bodies = sorted(m.body for m in await consumer.messages(10))
    assert bodies == sorted(b"%d" % i for i in range(10))


async def test_ephemeral_topics_and_channels_never_touch_disk(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=1)
    consumer = await Conn.consumer(nsqd, "e#ephemeral", "c#ephemeral", ready=0)
    await publish(nsqd, "e#ephemeral", [b"a", b"b", b"c"])
    await publish(nsqd, "durable", [b"x"])
    await Conn.consumer(nsqd, "durable", "c#ephemeral")
    await stop(nsqd)
    await consumer.aclose()
    assert not [n for n in os.listdir(tmp_path) if "ephemeral" in n]
    assert read_nsqd_dat(str(tmp_path))["topics"] == [
        {"name": "durable", "paused": False, "channels": None}
    ]


# -- restart ------------------------------------------------------------------------------


async def test_restart_delivers_every_queued_and_in_flight_message(nursery, tmp_path):
    path = str(tmp_path)
    nsqd = await start_nsqd(nursery, path, mem_queue_size=4)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=3)
    await publish(nsqd, "t", [b"%02d" % i for i in range(20)])
    in_flight = await consumer.messages(3)
    await consumer.send(fin(in_flight[0].id))
    await publish(nsqd, "waiting", [b"no channel yet"])
    nsqd = await restart(nursery, nsqd, path, mem_queue_size=4)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=100)
    again = await consumer.messages(19)
    assert sorted(m.body for m in again) == [b"%02d" % i for i in range(1, 20)]
    attempts = {bytes(m.body): m.attempts for m in again}
    assert attempts[bytes(in_flight[1].body)] == 2 and attempts[bytes(in_flight[2].body)] == 2
    assert attempts[b"10"] == 1
    await consumer.no_frame_for(0.2)
    late = await Conn.consumer(nsqd, "waiting", "first", ready=1)
    assert (await late.message()).body == b"no channel yet"


async def test_a_deferred_message_keeps_its_due_time_across_a_restart(
    nursery, tmp_path, autojump_clock
):
    path = str(tmp_path)
    nsqd = await start_nsqd(nursery, path)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    producer = await Conn.open(nsqd)
    await producer.send(dpub("t", 3_600_000, b"in an hour") + pub("t", b"now"))
    assert [await producer.response(), await producer.response()] == [b"OK", b"OK"]
    now = await consumer.message()
    await consumer.send(req(now.id, 600_000))  # due in ten minutes
    await consumer.no_frame_for(1)
    nsqd = await restart(nursery, nsqd, path)
    assert os.path.exists(tmp_path / "t:c.diskqueue.deferred.dat")
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    consumer.answer_heartbeats = True
    start = trio.current_time()
    await consumer.no_frame_for(590)
    requeued = await consumer.message()
    assert requeued.body == b"now" and requeued.attempts == 2
    assert 590 <= trio.current_time() - start <= 601
    await consumer.send(fin(requeued.id))
    await consumer.no_frame_for(2900)
    later = await consumer.message()
    assert later.body == b"in an hour"
    assert 3590 <= trio.current_time() - start <= 3601
    await consumer.send(fin(later.id))
    await stop(nsqd)
    assert not os.path.exists(tmp_path / "t:c.diskqueue.deferred.dat")


async def test_a_topics_undelivered_dpub_keeps_its_due_time_too(nursery, tmp_path, autojump_clock):
    path = str(tmp_path)
    nsqd = await start_nsqd(nursery, path)
    producer = await Conn.open(nsqd)
    await producer.send(dpub("t", 120_000, b"deferred") + pub("t", b"plain"))
    assert [await producer.response(), await producer.response()] == [b"OK", b"OK"]
    nsqd = await restart(nursery, nsqd, path)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    consumer.answer_heartbeats = True
    start = trio.current_time()
    plain = await consumer.message()
    assert plain.body == b"plain"
    await consumer.send(fin(plain.id))
    deferred = await consumer.message()
    assert deferred.body == b"deferred" and 119 <= trio.current_time() - start <= 121


# -- nsqd.dat -----------------------------------------------------------------------------


async def test_nsqd_dat_records_topics_channels_and_pauses_in_gos_format(nursery, tmp_path):
    path = str(tmp_path)
    nsqd = await start_nsqd(nursery, path)
    topic = nsqd.get_topic("t")
    topic.get_channel("c").pause()
    topic.get_channel("d")
    nsqd.get_topic("quiet").pause()
    await nsqd.metadata.flush()
    text = (tmp_path / "nsqd.dat").read_text()
    assert text == (
        '{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":true},'
        '{"name":"d","paused":false}]},{"name":"quiet","paused":true,"channels":null}],'
        '"version":"1.3.0"}'
    )
    nsqd = await restart(nursery, nsqd, path)
    assert nsqd.topics["quiet"].paused and not nsqd.topics["t"].paused
    channels = nsqd.topics["t"].channels
    assert (channels["c"].paused, channels["d"].paused) == (True, False)
    nsqd.delete_topic("quiet")
    nsqd.topics["t"].delete_channel("c")
    await nsqd.metadata.flush()
    assert read_nsqd_dat(path)["topics"] == [
        {"name": "t", "paused": False, "channels": [{"name": "d", "paused": False}]}
    ]


async def test_nsqd_dat_with_invalid_names_skips_them(nursery, tmp_path):
    (tmp_path / "nsqd.dat").write_text(
        json.dumps(
            {
                "topics": [
                    {"name": "bad topic", "paused": False, "channels": None},
                    {"name": "ok", "paused": True, "channels": [{"name": "bad/chan"}]},
                ],
                "version": "1.3.0",
            }
        )
    )
    nsqd = await start_nsqd(nursery, str(tmp_path))
    assert list(nsqd.topics) == ["ok"] and nsqd.topics["ok"].paused
    assert nsqd.topics["ok"].channels == {}


async def test_a_corrupt_nsqd_dat_stops_startup(tmp_path):
    (tmp_path / "nsqd.dat").write_text("{not json")
    options = dataclasses.replace(
        NSQDOptions(), tcp_address="127.0.0.1:0", http_address="", data_path=str(tmp_path)
    )
    with pytest.raises(StartupError, match="failed to load metadata"):
        await NSQD(options).run()


async def test_a_data_directory_in_gos_format_is_served(nursery, tmp_path):
    """Files as Go nsqd leaves them: nsqd.dat, a channel's segment and metadata (§7)."""
    payloads = [
        encode_message(b"%016x" % (0x1000 + i), 1_700_000_000_000_000_000, 1, b"go %d" % i)
        for i in range(3)
    ]
    segment = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
    (tmp_path / "orders:billing.diskqueue.000000.dat").write_bytes(segment)
    (tmp_path / "orders:billing.diskqueue.meta.dat").write_text(f"3\n0,0\n0,{len(segment)}\n")
    (tmp_path / "nsqd.dat").write_text(
        '{"topics":[{"name":"orders","paused":false,"channels":'
        '[{"name":"billing","paused":false}]}],"version":"1.3.0"}'
    )
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "orders", "billing", ready=10)
    messages = await consumer.messages(3)
    assert [m.body for m in messages] == [b"go 0", b"go 1", b"go 2"]
    assert [m.attempts for m in messages] == [2, 2, 2]
    assert messages[0].id == b"%016x" % 0x1000
    assert messages[0].timestamp == 1_700_000_000_000_000_000


# -- disk faults --------------------------------------------------------------------------


class FullDisk:
    """Makes writes to the disk queues' segments fail with ENOSPC until `free` is called."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_pwrite = LocalFileSystem.pwrite
        self.full = True

        def pwrite(fs: LocalFileSystem, fd: int, data: bytes | memoryview, offset: int) -> int:
            segment = re.search(r"\.diskqueue\.\d+\.dat$", os.readlink(f"/proc/self/fd/{fd}"))
            if self.full and segment:
                raise OSError(28, "No space left on device")
            return real_pwrite(fs, fd, data, offset)

        monkeypatch.setattr(LocalFileSystem, "pwrite", pwrite)

    def free(self) -> None:
        self.full = False


async def test_a_full_disk_fails_pub_reports_unhealthy_and_loses_nothing(
    nursery, tmp_path, monkeypatch
):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=0)
    await publish(nsqd, "t", [b"before %d" % i for i in range(5)])
    disk = FullDisk(monkeypatch)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"refused"))
    assert await producer.error() == (
        b"E_PUB_FAILED PUB failed failed to write to disk - No space left on device"
    )
    assert await producer.closed()
    assert nsqd.health == "NOK - failed to write to disk - No space left on device"
    # reads go on: everything accepted before is delivered
    await consumer.send(b"RDY 10\n")
    delivered = await consumer.messages(5)
    assert sorted(m.body for m in delivered) == [b"before %d" % i for i in range(5)]
    # a timeout while the disk is full: the message stays in memory, not lost
    disk.free()
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"after"))
    assert await producer.response() == b"OK"
    assert nsqd.health == "OK"
    assert (await consumer.message()).body == b"after"


class UnreadableDisk:
    """Makes reads of the disk queues' segments fail with EIO until `heal` is called."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_pread = LocalFileSystem.pread
        self.failing = True
        self.failed = 0

        def pread(fs: LocalFileSystem, fd: int, size: int, offset: int) -> bytes:
            if self.failing:
                self.failed += 1
                raise OSError(5, "Input/output error")
            return real_pread(fs, fd, size, offset)

        monkeypatch.setattr(LocalFileSystem, "pread", pread)

    def heal(self) -> None:
        self.failing = False


@pytest.mark.parametrize("where", ["topic", "channel"])
async def test_a_disk_that_refuses_reads_reports_unhealthy_retries_and_loses_nothing(
    nursery, tmp_path, monkeypatch, where
):
    """A read error in the topic's backlog move (`where` = topic) or in a channel's delivery
    (`where` = channel) used to end nsqd (and lose the batch being read). Now: health NOK,
    publishing goes on, a retry about once a second (not a busy loop), and once the disk
    reads again every message is delivered without any client doing anything more."""
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    topic = nsqd.get_topic("t")
    channel = topic.get_channel("c")
    if where == "topic":
        disk = UnreadableDisk(monkeypatch)
        await publish(nsqd, "t", [b"m%d" % i for i in range(30)])
    else:
        await publish(nsqd, "t", [b"m%d" % i for i in range(30)])
        with trio.fail_after(5):
            while topic.backend.depth:  # moved to the channel's disk queue
                await trio.sleep(0.01)
        disk = UnreadableDisk(monkeypatch)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=100)
    with trio.fail_after(5):
        while not nsqd.health.startswith("NOK"):
            await trio.sleep(0.01)
    assert nsqd.health == "NOK - failed to read from disk - Input/output error"
    await consumer.no_frame_for(0.3)
    failed_before = disk.failed
    await trio.sleep(1.5)
    assert 1 <= disk.failed - failed_before <= 6  # retried, about once a second
    await publish(nsqd, "t", [b"during"])  # writes still work
    assert channel.depth + topic.backend.depth == 31
    disk.heal()
    with trio.fail_after(5):
        delivered = await consumer.messages(31)
    assert sorted(m.body for m in delivered) == sorted(
        [b"m%d" % i for i in range(30)] + [b"during"]
    )
    assert nsqd.health == "OK"


async def test_requeue_while_the_disk_is_full_keeps_the_message_in_memory(
    nursery, tmp_path, monkeypatch
):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    await publish(nsqd, "t", [b"x"])
    message = await consumer.message()
    FullDisk(monkeypatch)
    await consumer.send(req(message.id, 0))
    again = await consumer.message()
    assert (again.id, again.attempts) == (message.id, 2)


async def test_mem_queue_size_0_moves_messages_disk_to_disk_to_every_channel(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    topic = nsqd.get_topic("t")
    topic.get_channel("one")
    topic.get_channel("two")
    await publish(nsqd, "t", [b"%03d" % i for i in range(100)])
    first = await Conn.consumer(nsqd, "t", "one", ready=200)
    second = await Conn.consumer(nsqd, "t", "two", ready=200)
    got_first = await first.messages(100)
    got_second = await second.messages(100)
    assert (
        [m.body for m in got_first]
        == [m.body for m in got_second]
        == [b"%03d" % i for i in range(100)]
    )
    # the records were copied verbatim from the topic's segment to each channel's
    topic_records = (tmp_path / "t.diskqueue.000000.dat").read_bytes()
    assert len(topic_records) == 100 * (4 + 26 + 3)
    assert (tmp_path / "t:one.diskqueue.000000.dat").read_bytes() == topic_records
    assert (tmp_path / "t:two.diskqueue.000000.dat").read_bytes() == topic_records
    assert topic.channels["one"].message_count == topic.channels["two"].message_count == 100


async def test_a_record_damaged_on_disk_is_set_aside_counted_and_the_rest_delivered(
    nursery, tmp_path
):
    """A flipped bit in a segment nsqd wrote is found by its checksum side file
    (trionsq/diskqueue/checksums.py): that message is not delivered but moved to
    ``t.diskqueue.bad``, /stats counts it, and every other message is delivered."""
    from trionsq.diskqueue import checksums
    from trionsq.nsqd.stats import snapshot

    if not checksums.ENABLED:
        pytest.skip("no compiled CRC-32C")
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    bodies = [b"message %03d" % i for i in range(50)]
    await publish(nsqd, "t", bodies)
    await stop(nsqd)
    assert (tmp_path / "t.diskqueue.000000.crc").exists()
    segment = tmp_path / "t.diskqueue.000000.dat"
    data = bytearray(segment.read_bytes())
    record = 4 + 26 + len(bodies[0])
    data[17 * record + 4 + 26 + 3] ^= 0x04  # a bit of message 17's body
    segment.write_bytes(bytes(data))
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=100)
    got = [m.body for m in await consumer.messages(49)]
    await consumer.no_frame_for(0.2)
    assert sorted(got) == bodies[:17] + bodies[18:]
    (topic,) = snapshot(nsqd)["topics"]
    assert topic["corrupt_count"] == 1
    assert "corrupt_count" not in topic["channels"][0]
    bad = (tmp_path / "t.diskqueue.bad").read_bytes()
    assert bad[:4] == struct.pack(">I", 26 + len(bodies[0])) and bad[4 + 26 :] != bodies[17]
