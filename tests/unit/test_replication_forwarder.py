"""The forwarder's bookkeeping (trionsq/nsqd/replication_forward.py) with stand-ins for the
topic, the peer and the primary: what waits for what, and when each batch fails. The whole
path over real connections: tests/integration/test_replication_forward.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio

from trionsq.nsqd.acks import TaskWaiter
from trionsq.nsqd.replication import forward as forward
from trionsq.nsqd.replication import wire as wire
from trionsq.nsqd.replication.batching import FLUSH_AT
from trionsq.nsqd.replication.log import decode_records, encode_frames
from trionsq.nsqd.replication.roles import PRIMARY, REPLICA
from trionsq.protocol import GUIDFactory
from trionsq.protocol.message import encode_new_frames

ACK_TIMEOUT = 2.0


class FakePeer:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.requests: dict[int, tuple[dict[str, Any], bytes, Any]] = {}
        self.forgotten: list[int] = []
        self.connected = True

    def request(self, kind: int, header: dict[str, Any], blob: bytes, on_answer: Any) -> int | None:
        assert kind == wire.PUB_FORWARD
        if not self.connected:
            return None
        rid = len(self.requests) + 1
        self.requests[rid] = (header, blob, on_answer)
        return rid

    def forget(self, rid: int) -> None:
        self.forgotten.append(rid)

    def answer(self, rid: int, ok: bool | None, **extra: Any) -> None:
        on_answer = self.requests[rid][2]
        if ok is None:
            on_answer(None)  # the connection dropped
        else:
            header = {"rid": rid, "ok": ok, "error": "nope", **extra}
            on_answer((wire.PUB_FORWARD_REPLY, header, b""))


class FakeReplica:
    """What a Forwarder uses of its TopicReplica."""

    def __init__(self) -> None:
        self.name = "rt"
        self.node_id = 2
        self.role = REPLICA
        self.primary: int | None = None
        self.accepted = 0
        self.peers = {1: FakePeer(1), 3: FakePeer(3)}
        options = SimpleNamespace(replication_ack_timeout=ACK_TIMEOUT)
        self.repl = SimpleNamespace(
            nsqd=SimpleNamespace(options=options),
            peer_by_id=self._peer_by_id,
            batching=SimpleNamespace(schedule=lambda replica: None),
        )
        self.local_waits: list[tuple[int, Any]] = []

    def _peer_by_id(self, node_id: int | None) -> FakePeer | None:
        peer = self.peers.get(node_id) if node_id is not None else None
        return peer if peer is not None and peer.connected else None

    def wait_for(self, target: int, waiter: Any) -> bool:
        self.local_waits.append((target, waiter))
        return True


def frames(count: int) -> list[bytes]:
    guid = GUIDFactory(2)
    return encode_new_frames(guid.next_ids(count), 1, [b"m%d" % i for i in range(count)])


def forwarder() -> tuple[forward.Forwarder, FakeReplica]:
    replica = FakeReplica()
    return forward.Forwarder(replica), replica  # type: ignore[arg-type]


async def test_a_batch_waits_for_a_primary_then_is_sent_with_its_due_times() -> None:
    fwd, replica = forwarder()
    batch = fwd.add(frames(2), 0)
    assert fwd.add(frames(1), 123) is batch  # one batch per scheduler pass
    fwd.seal()
    waiter = TaskWaiter(1)
    assert batch.wait_for(0, waiter)
    assert fwd.waiting == [batch]  # nobody leads: it waits
    replica.primary = 1
    fwd.primary_changed()
    header, blob, _ = replica.peers[1].requests[1]
    assert header == {"topic": "rt", "count": 3}
    assert [due for due, _ in decode_records(blob)] == [0, 0, 123]
    replica.peers[1].answer(1, True)
    assert await waiter.wait()
    assert (fwd.forwarded, fwd.failed) == (3, 0)


async def test_a_read_batch_over_two_forwarded_batches_fails_if_one_fails() -> None:
    fwd, replica = forwarder()
    replica.primary = 1
    first = fwd.add(frames(FLUSH_AT), 0)  # an MPUB's worth: sent at once
    assert replica.peers[1].requests and fwd.open is None
    second = fwd.add(frames(1), 0)
    assert second is not first
    fwd.seal()
    # One connection's read batch published into both: its answers wait for both.
    waiter = TaskWaiter(2)
    for batch in (first, second):
        assert batch.wait_for(0, waiter)
    replica.peers[1].answer(2, True)
    replica.peers[1].answer(1, False)
    assert not await waiter.wait()
    assert (fwd.forwarded, fwd.failed) == (1, FLUSH_AT)


async def test_without_a_primary_a_batch_fails_at_the_ack_timeout() -> None:
    fwd, _ = forwarder()
    batch = fwd.add(frames(1), 0)
    fwd.seal()
    waiter = TaskWaiter(1)
    batch.wait_for(0, waiter)
    fwd.expire(trio.current_time() + ACK_TIMEOUT / 2)
    assert fwd.waiting == [batch]
    fwd.expire(trio.current_time() + ACK_TIMEOUT + 0.01)
    assert fwd.waiting == [] and not await waiter.wait()
    # Registered after its answer: failed at once, or (succeeded) not registered at all.
    late = TaskWaiter(1)
    assert batch.wait_for(0, late) and not await late.wait()
    done = forward.ForwardBatch(fwd, 0.0)
    done.finish(True)
    assert not done.wait_for(0, TaskWaiter(1))


@pytest.mark.parametrize("event", ["another primary", "connection drop", "no answer"])
async def test_a_sent_batch_fails(event: str) -> None:
    fwd, replica = forwarder()
    replica.primary = 1
    batch = fwd.add(frames(1), 0)
    fwd.seal()
    waiter = TaskWaiter(1)
    batch.wait_for(0, waiter)
    peer = replica.peers[1]
    if event == "another primary":
        replica.primary = 3
        fwd.primary_changed()
        assert peer.forgotten == [1]
    elif event == "connection drop":
        peer.answer(1, None)
    else:
        fwd.expire(trio.current_time() + ACK_TIMEOUT)  # the primary's own timeout: not yet
        assert fwd.sent
        fwd.expire(trio.current_time() + ACK_TIMEOUT + forward.REPLY_GRACE + 0.01)
        assert peer.forgotten == [1]
    assert not await waiter.wait()
    assert not fwd.sent and fwd.failed == 1
    peer.answer(1, True)  # a late answer changes nothing
    assert fwd.forwarded == 0


async def test_a_batch_refused_by_a_former_primary_goes_to_the_next_one() -> None:
    fwd, replica = forwarder()
    replica.primary = 1
    batch = fwd.add(frames(2), 5)
    fwd.seal()
    waiter = TaskWaiter(1)
    batch.wait_for(0, waiter)
    _, blob, _ = replica.peers[1].requests[1]
    # Node 1 no longer leads (this node has not heard of another yet): it wrote nothing.
    replica.peers[1].answer(1, False, refused=True)
    assert fwd.waiting == [batch] and fwd.failed == 0
    fwd.expire(trio.current_time())
    assert len(replica.peers[1].requests) == 1  # not sent to the node that refused it
    replica.primary = 3
    fwd.primary_changed()
    assert replica.peers[3].requests[1][1] == blob  # the same messages, IDs and due times
    replica.peers[3].answer(1, True)
    assert await waiter.wait()
    assert (fwd.forwarded, fwd.failed) == (2, 0)


async def test_what_waited_is_published_here_when_this_node_takes_office(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fwd, replica = forwarder()
    published: list[tuple[int, int]] = []

    def put_here(replica: FakeReplica, batch: list[bytes], due: int) -> None:
        replica.accepted += len(batch)
        published.append((len(batch), due))

    monkeypatch.setattr(forward, "put_here", put_here)
    replica.primary = 1
    sent = fwd.add(frames(1), 0)
    fwd.seal()  # sent to node 1
    replica.peers[1].connected = False
    replica.primary = None  # node 1 is gone, an election runs
    waiting = fwd.add(frames(2), 0)
    fwd.add(frames(1), 77)
    fwd.seal()
    sent_waiter, waiting_waiter = TaskWaiter(1), TaskWaiter(1)
    sent.wait_for(0, sent_waiter)
    waiting.wait_for(0, waiting_waiter)
    replica.role, replica.primary = PRIMARY, replica.node_id
    fwd.primary_changed()
    assert not await sent_waiter.wait()  # sent to the former primary: failed
    assert published == [(2, 0), (1, 77)]
    # The waiting batch's answers now wait for this node's quorum, at its stream position.
    assert replica.local_waits == [(3, waiting_waiter)]
    late = TaskWaiter(1)
    waiting.wait_for(0, late)
    assert replica.local_waits[-1] == (3, late)


def test_the_primary_refuses_a_forward_for_a_topic_it_does_not_lead() -> None:
    repl = SimpleNamespace(replica_of=lambda name, create: None)
    blob = encode_frames(frames(1), 0)
    answers = forward.answer_forwarded(repl, {"topic": "rt", "rid": 7}, blob, None)  # type: ignore[arg-type]
    assert len(answers) == 1
    kind, header, _ = _decode(answers[0])
    assert kind == wire.PUB_FORWARD_REPLY
    assert header["rid"] == 7 and header["ok"] is False and header["refused"] is True
    assert "not the primary" in header["error"]
    with pytest.raises(wire.WireError):
        forward.answer_forwarded(repl, {"topic": "rt", "rid": 8}, b"\x00\x01", None)  # type: ignore[arg-type]


def _decode(frame: bytes) -> tuple[int, dict[str, Any], bytes]:
    import json

    header_len = int.from_bytes(frame[5:7], "big")
    return frame[4], json.loads(frame[7 : 7 + header_len]), frame[7 + header_len :]
