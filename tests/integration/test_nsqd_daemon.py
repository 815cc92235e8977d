"""nsqd's delivery semantics, in process with a mock clock: timeouts, REQ delays, DPUB, TOUCH,
the RDY window, disconnects, heartbeats, ephemeral channels, sharing and fan-out, shutdown."""

from __future__ import annotations

import re

import trio

from tests.nsqd_harness import Conn, start_nsqd
from trionsq.protocol import cls, dpub, fin, mpub, nop, pub, rdy, req, touch


async def test_publish_then_consume_in_order_with_attempts_and_ids(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"one") + mpub("t", [b"two", b"three"]))
    assert [await producer.response(), await producer.response()] == [b"OK", b"OK"]
    consumer = await Conn.consumer(nsqd, "t", "c", ready=10)
    messages = await consumer.messages(3)
    assert [m.body for m in messages] == [b"one", b"two", b"three"]
    assert all(m.attempts == 1 for m in messages)
    ids = [m.id for m in messages]
    assert len(set(ids)) == 3 and ids == sorted(ids)
    assert all(len(i) == 16 and i == i.lower() for i in ids)


async def test_message_timeout_redelivers_with_attempts_after_exactly_msg_timeout(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1, msg_timeout=5000)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    first = await consumer.message()
    start = trio.current_time()
    await consumer.no_frame_for(4.9)
    second = await consumer.message()
    assert second.id == first.id and second.attempts == 2
    assert 5.0 <= trio.current_time() - start < 5.2
    channel = nsqd.topics["t"].channels["c"]
    assert channel.timeout_count == 1
    await consumer.send(fin(first.id))
    await consumer.no_frame_for(10)
    assert channel.in_flight_count == 0


async def test_fin_of_timed_out_message_fails_without_closing(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1, msg_timeout=1000)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    message = await consumer.message()
    await consumer.send(rdy(0))
    await trio.sleep(1.5)
    await consumer.send(fin(message.id))
    assert await consumer.error() == b"E_FIN_FAILED FIN " + message.id + b" failed ID not in flight"
    await consumer.send(rdy(1))
    again = await consumer.message()
    assert again.id == message.id and again.attempts == 2


async def test_a_run_of_fins_refuses_only_the_unknown_one(nursery, tmp_path, autojump_clock):
    """FINs arriving together are finished in one pass: one the channel refuses is answered
    with its error in its place, and the others are finished all the same."""
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=3, msg_timeout=1000)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"a", b"b", b"c"]))
    first, second, third = await consumer.messages(3)
    unknown = b"0123456789abcdef"
    await consumer.send(fin(first.id) + fin(unknown) + fin(second.id) + nop() + fin(third.id))
    assert await consumer.error() == b"E_FIN_FAILED FIN " + unknown + b" failed ID not in flight"
    await consumer.no_frame_for(2.0)  # none of the three times out and comes back
    client = next(iter(nsqd.clients.values()))
    assert client.finish_count == 3 and not client.in_flight


async def test_req_with_delay_defers_and_zero_requeues_at_once(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    message = await consumer.message()
    await consumer.send(req(message.id, 0))
    again = await consumer.message()
    assert (again.id, again.attempts) == (message.id, 2)
    start = trio.current_time()
    await consumer.send(req(again.id, 3000))
    await consumer.no_frame_for(2.9)
    third = await consumer.message()
    assert (third.id, third.attempts) == (message.id, 3)
    assert 3.0 <= trio.current_time() - start < 3.1
    assert nsqd.topics["t"].channels["c"].requeue_count == 2


async def test_req_timeout_above_max_is_clamped(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_req_timeout=10.0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    message = await consumer.message()
    start = trio.current_time()
    await consumer.send(req(message.id, 999_999_999))
    again = await consumer.message()
    assert again.attempts == 2
    assert 10.0 <= trio.current_time() - start < 10.1


async def test_dpub_delivers_after_the_deferral(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    producer = await Conn.open(nsqd)
    start = trio.current_time()
    await producer.send(dpub("t", 2500, b"later") + pub("t", b"now"))
    first = await consumer.message()
    assert first.body == b"now"
    second = await consumer.message()
    assert second.body == b"later" and second.attempts == 1
    assert 2.5 <= trio.current_time() - start < 2.6
    assert nsqd.topics["t"].channels["c"].message_count == 2


async def test_touch_extends_the_deadline(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1, msg_timeout=2000)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    message = await consumer.message()
    start = trio.current_time()
    await trio.sleep(1.5)
    await consumer.send(touch(message.id))
    await consumer.no_frame_for(1.9)  # the original deadline (2 s) passes
    again = await consumer.message()
    assert again.attempts == 2
    assert 3.5 <= trio.current_time() - start < 3.6


async def test_touch_is_capped_by_max_msg_timeout(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_msg_timeout=3.0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=2, msg_timeout=2000)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"a"))
    first = await consumer.message()
    start = trio.current_time()
    await trio.sleep(1.8)
    await producer.send(pub("t", b"b"))
    second = await consumer.message()  # deadline: 1.8 + 2 = 3.8
    await consumer.send(touch(first.id))  # wants 3.8, capped at 0 + 3 = 3.0
    again = await consumer.message()
    assert again.id == first.id and again.attempts == 2
    assert 3.0 <= trio.current_time() - start < 3.1
    late = await consumer.message()
    assert late.id == second.id and 3.8 <= trio.current_time() - start < 3.9


async def test_rdy_window_is_never_exceeded(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=0)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"%d" % i for i in range(10)]))
    await consumer.no_frame_for(1)
    await consumer.send(rdy(3))
    batch = await consumer.messages(3)
    await consumer.no_frame_for(1)
    await consumer.send(fin(batch[0].id))
    await consumer.message()
    await consumer.no_frame_for(1)
    client = next(iter(nsqd.topics["t"].channels["c"].clients))
    assert len(client.in_flight) == 3


async def test_disconnected_consumers_messages_wait_for_their_timeout(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    first = await Conn.consumer(nsqd, "t", "c", ready=1, msg_timeout=4000)
    producer = await Conn.open(nsqd)
    await producer.send(pub("t", b"x"))
    message = await first.message()
    start = trio.current_time()
    await first.aclose()
    second = await Conn.consumer(nsqd, "t", "c", ready=1)
    # The other consumer may not FIN it ...
    await second.no_frame_for(1)
    await second.send(fin(message.id))
    assert await second.error() == (
        b"E_FIN_FAILED FIN " + message.id + b" failed client does not own message"
    )
    again = await second.message()
    assert again.id == message.id and again.attempts == 2
    assert 4.0 <= trio.current_time() - start < 4.1


async def test_sharing_within_a_channel_and_fan_out_across_channels(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    a = await Conn.consumer(nsqd, "t", "shared", ready=100)
    b = await Conn.consumer(nsqd, "t", "shared", ready=100)
    other = await Conn.consumer(nsqd, "t", "other", ready=100)
    producer = await Conn.open(nsqd)
    bodies = [b"%d" % i for i in range(40)]
    await producer.send(mpub("t", bodies))
    assert await producer.response() == b"OK"
    got_other = await other.messages(40)
    assert sorted(m.body for m in got_other) == sorted(bodies)
    got_a, got_b = [], []
    with trio.move_on_after(2):
        async with trio.open_nursery() as n:

            async def drain(conn, into):
                while True:
                    into.append((await conn.message()).body)

            n.start_soon(drain, a, got_a)
            n.start_soon(drain, b, got_b)
    assert sorted(got_a + got_b) == sorted(bodies)
    assert got_a and got_b, "both subscribers of one channel get a share"


async def test_cls_stops_delivery_but_allows_fin(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"a", b"b"]))
    message = await consumer.message()
    await consumer.send(cls())
    assert await consumer.response() == b"CLOSE_WAIT"
    await consumer.send(fin(message.id) + rdy(5))
    await consumer.no_frame_for(2)
    assert nsqd.topics["t"].channels["c"].depth == 1


async def test_heartbeats_and_close_after_two_missed(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    conn = await Conn.open(nsqd, heartbeat_interval=1000)
    start = trio.current_time()
    assert await conn.frame(skip_heartbeats=False) == (0, b"_heartbeat_")
    assert 1.0 <= trio.current_time() - start < 1.1
    await conn.send(nop())
    assert await conn.frame(skip_heartbeats=False) == (0, b"_heartbeat_")
    assert await conn.closed()
    # closed ~2 intervals after the last command (the NOP at ~1 s)
    assert 2.9 <= trio.current_time() - start < 3.2
    assert not nsqd.clients


async def test_messages_wait_in_the_topic_for_its_first_channel(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=5)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"%d" % i for i in range(12)]))
    assert await producer.response() == b"OK"
    topic = nsqd.topics["t"]
    assert (topic.depth, topic.backend.depth) == (12, 7)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=20)
    got = await consumer.messages(12)
    assert sorted(m.body for m in got) == sorted(b"%d" % i for i in range(12))
    assert topic.depth == 0


async def test_ephemeral_channel_goes_with_its_last_client_and_topic_with_last_channel(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    one = await Conn.consumer(nsqd, "t#ephemeral", "c#ephemeral", ready=1)
    two = await Conn.consumer(nsqd, "t#ephemeral", "c#ephemeral", ready=1)
    await one.aclose()
    await trio.sleep(0.1)
    assert "c#ephemeral" in nsqd.topics["t#ephemeral"].channels
    await two.aclose()
    await trio.sleep(0.1)
    assert "t#ephemeral" not in nsqd.topics


async def test_max_channel_consumers(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path), max_channel_consumers=1)
    await Conn.consumer(nsqd, "t", "c")
    second = await Conn.open(nsqd)
    await second.send(b"SUB t c\n")
    assert await second.error() == b"E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 1"
    assert await second.closed()


async def test_sample_rate_drops_a_share_of_messages(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=2500, sample_rate=10)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"m"] * 2000))
    received = 0
    with trio.move_on_after(1):
        while True:
            await consumer.message()
            received += 1
    # delivery probability is (rate + 1) / 100 in nsqd
    assert 100 < received < 350


async def test_shutdown_hands_in_flight_and_deferred_messages_to_the_backend(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=2)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"a", b"b", b"c"]) + dpub("t", 60_000, b"d"))
    await consumer.messages(2)
    channel = nsqd.topics["t"].channels["c"]
    backend = channel.backend
    nsqd.request_exit()
    await nsqd.wait_exited()
    assert backend.depth == 4  # one queued, two in flight, one deferred
    attempts = sorted(frame[16] << 8 | frame[17] for frame in backend.take(10))
    assert attempts == [0, 0, 1, 1]
    assert await consumer.closed()


async def test_a_consumer_that_stops_reading_holds_bounded_output(nursery, tmp_path):
    from trionsq.nsqd.client_v2 import OUTPUT_HIGH_WATER
    from trionsq.protocol import MAGIC_V2, sub

    nsqd = await start_nsqd(nursery, str(tmp_path))
    host, port = nsqd.tcp_address
    stalled = await trio.open_tcp_stream(host, port)
    await stalled.send_all(MAGIC_V2 + sub("t", "c") + rdy(2500))
    producer = await Conn.open(nsqd)
    body = b"x" * 10_000
    for _ in range(5):
        await producer.send(mpub("t", [body] * 500))
        assert await producer.response() == b"OK"
    await trio.sleep(0.5)
    channel = nsqd.topics["t"].channels["c"]
    (client,) = channel.clients
    assert len(client.out) <= OUTPUT_HIGH_WATER + 2500 * 10_034
    assert channel.depth > 0, "messages beyond what the stalled client holds stay queued"
    assert len(client.in_flight) < 2500
    await stalled.aclose()


async def test_an_internal_error_ends_only_that_connection(nursery, tmp_path, monkeypatch):
    from trionsq.nsqd import protocol_v2

    def broken(nsqd, client, cmd):
        raise RuntimeError("bug")

    monkeypatch.setitem(protocol_v2._HANDLERS, b"NOP", broken)
    nsqd = await start_nsqd(nursery, str(tmp_path))
    victim = await Conn.open(nsqd)
    await victim.send(nop())
    assert await victim.closed()
    survivor = await Conn.open(nsqd)
    await survivor.send(pub("t", b"still here"))
    assert await survivor.response() == b"OK"


async def test_an_overlong_command_line_closes_without_an_error_frame(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    conn = await Conn.open(nsqd)
    await conn.send(b"PUB " + b"t" * 20_000)
    assert await conn.closed()
    assert conn.decoder.buffered == 0


async def test_a_body_cut_short_by_the_read_deadline_gets_nsqds_read_error(
    nursery, tmp_path, autojump_clock
):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    conn = await Conn.open(nsqd, heartbeat_interval=1000)
    await conn.send(pub("t", b"0123456789")[:-4])
    assert await conn.error() == b"E_BAD_MESSAGE PUB failed to read message body"
    assert await conn.closed()


async def test_identify_without_client_id_and_hostname_stores_them_empty(nursery, tmp_path):
    nsqd = await start_nsqd(nursery, str(tmp_path))
    await Conn.open(nsqd, user_agent="test/1.0")
    (client,) = nsqd.clients.values()
    assert (client.client_id, client.hostname, client.user_agent) == ("", "", "test/1.0")


async def test_a_client_resetting_its_connection_is_not_logged_as_a_bug(nursery, tmp_path, caplog):
    import socket as stdlib_socket
    import struct

    from trionsq.protocol import MAGIC_V2, sub

    nsqd = await start_nsqd(nursery, str(tmp_path))
    host, port = nsqd.tcp_address
    consumer = await trio.open_tcp_stream(host, port)
    await consumer.send_all(MAGIC_V2 + sub("t", "c") + rdy(100))
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"x" * 1000] * 100))
    assert await producer.response() == b"OK"
    await trio.sleep(0.2)
    # close with RST (SO_LINGER 0) while messages are in flight and unread
    consumer.socket.setsockopt(
        stdlib_socket.SOL_SOCKET, stdlib_socket.SO_LINGER, struct.pack("ii", 1, 0)
    )
    consumer.socket.close()
    with trio.fail_after(5):
        while nsqd.topics["t"].channels["c"].clients:
            await trio.sleep(0.01)
    # Go nsqd's lines for a connection that failed (at ERROR, as Go's), no traceback
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert errors
    for record in errors:
        assert not record.exc_info, record.getMessage()
        assert re.match(
            r"(client\(\S+\) - failed to (read command|send response) - "
            r"|PROTOCOL\(V2\): \[\S+\] messagePump error - )(read|write) tcp ",
            record.getMessage(),
        ), record.getMessage()
    await producer.send(pub("t", b"still serving"))
    assert await producer.response() == b"OK"


async def test_a_deleted_topics_pump_task_ends(nursery, tmp_path, autojump_clock):
    nsqd = await start_nsqd(nursery, str(tmp_path))

    def pump_tasks() -> int:
        root = nsqd._nursery
        assert root is not None
        return sum(t.name.startswith("topic-pump:") for t in root.child_tasks)

    for i in range(5):
        consumer = await Conn.consumer(nsqd, f"t{i}#ephemeral", "c#ephemeral", ready=1)
        await consumer.aclose()
        await trio.sleep(0.1)
    assert not nsqd.topics
    assert pump_tasks() == 0
    await Conn.consumer(nsqd, "kept", "c")
    await trio.sleep(0.1)
    assert pump_tasks() == 1


async def test_no_message_is_delivered_after_a_fatal_error(nursery, tmp_path):
    # Found by the stateful test: a PUB the consumer itself sent, then a fatal command in the
    # same write. The message must not go to the closing connection (it would sit in flight
    # there until msg_timeout); it stays queued for the next consumer.
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=5)
    await consumer.send(pub("t", b"x") + b"SUB t c\n")
    assert await consumer.response() == b"OK"
    assert await consumer.error() == b"E_INVALID cannot SUB in current state"
    assert await consumer.closed()
    channel = nsqd.topics["t"].channels["c"]
    assert (channel.in_flight_count, channel.depth) == (0, 1)
