"""The load of a trial and what it records: publishers, consumers and a monitor, each a
thread, all writing into one `History`.

- Bodies are unique and self-checking (`make_body`/`check_body`): the trial's tag, a sequence
  number, filler, and a hash of the rest; a body whose hash does not match is corrupt.
- Publishers send PUB and MPUB to a member chosen at random (replicas forward to the
  primary) and record each body as acknowledged (``OK``), failed (an error frame) or unknown
  (no answer: timeout, connection closed); after a failure they reconnect to another member.
- A consumer per member (together, a client listing every member as go-nsq's
  ``nsqd_tcp_addresses``) FINs everything and records each delivery: body, member, time.
  With a backlog channel, consumers of it start only at the drain (`start_backlog`).
- A monitor per member polls its ``/stats?format=json`` every `POLL_INTERVAL` and records the
  topic's replication role and epoch (or no answer).
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.nsq_conn import NSQConn
from trionsq.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    decode_message,
    mpub,
    pub,
)

from .cluster import BACKLOG_CHANNEL, CHANNEL, TOPIC, Member

POLL_INTERVAL = 0.1
#: How long a publisher waits for an answer (beyond nsqd's 5 s --replication-ack-timeout)
#: before it counts the publish as unknown and connects to another member.
PUBLISH_TIMEOUT = 6.0
_DIGEST = 8  # bytes of blake2b, 16 hex digits


def make_body(tag: str, seq: int, size: int) -> bytes:
    """A unique body of about `size` bytes: ``tag:seq:filler:hash``."""
    head = f"{tag}:{seq}:".encode()
    fill_len = max(0, size - len(head) - 2 * _DIGEST - 1)
    filler = (b"%d." % seq * (fill_len // 2 + 1))[:fill_len]
    payload = head + filler
    return payload + b":" + hashlib.blake2b(payload, digest_size=_DIGEST).hexdigest().encode()


def check_body(body: bytes) -> tuple[str, int] | None:
    """(tag, seq) of an intact body; None if it is corrupt (or not one of ours)."""
    payload, sep, digest = body.rpartition(b":")
    if not sep or hashlib.blake2b(payload, digest_size=_DIGEST).hexdigest().encode() != digest:
        return None
    try:
        tag, seq, _ = payload.split(b":", 2)
        return tag.decode(), int(seq)
    except (ValueError, UnicodeDecodeError):
        return None


@dataclass
class Delivery:
    t: float
    member: int
    body: bytes
    attempts: int
    #: when the consumer's connection was opened (a message read on a connection that was
    #: open across a cut of the member's client link may have been sent before the cut)
    conn_opened: float
    channel: str = CHANNEL


@dataclass
class Sample:
    """One /stats poll of a member: sent at `t0`, answered at `t1` (None: no answer)."""

    t0: float
    t1: float
    role: str | None
    epoch: int | None


@dataclass
class FaultEvent:
    t: float
    kind: str
    #: member indexes hit, and the primary (index, epoch) when it happened
    victims: list[int]
    primary: int | None
    epoch: int | None
    detail: str = ""
    #: whether this event is expected to need a new primary (a fault of the primary)
    failover: bool = False
    #: when the fault was in place (every victim killed, stopped or cut off)
    injected: float | None = None


@dataclass
class History:
    """Everything a trial observed (thread-safe appends under `lock`)."""

    tag: str
    members: int
    #: the channels every acknowledged message must be delivered on
    channels: tuple[str, ...] = (CHANNEL,)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: seq -> "pending" | "ok" | "error" | "unknown"
    status: dict[int, str] = field(default_factory=dict)
    #: seq -> (time sent, time answered or None)
    times: dict[int, tuple[float, float | None]] = field(default_factory=dict)
    #: seq -> member index published to
    via: dict[int, int] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    samples: list[list[Sample]] = field(default_factory=list)
    faults: list[FaultEvent] = field(default_factory=list)
    #: (member, start, end) of each cut of a member's link to the clients
    client_cuts: list[tuple[int, float, float | None]] = field(default_factory=list)
    heal_times: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    next_seq: int = 0

    def __post_init__(self) -> None:
        if not self.samples:
            self.samples = [[] for _ in range(self.members)]

    def allocate(self, n: int) -> list[int]:
        with self.lock:
            first = self.next_seq
            self.next_seq += n
            return list(range(first, first + n))

    def acked(self) -> set[int]:
        with self.lock:
            return {seq for seq, status in self.status.items() if status == "ok"}

    def delivered_seqs(self, channel: str = CHANNEL) -> set[int]:
        with self.lock:
            deliveries = [d for d in self.deliveries if d.channel == channel]
        seqs = set()
        for d in deliveries:
            checked = check_body(d.body)
            if checked is not None and checked[0] == self.tag:
                seqs.add(checked[1])
        return seqs

    def drained(self) -> bool:
        """Every acknowledged message delivered on every channel."""
        acked = self.acked()
        return all(acked <= self.delivered_seqs(channel) for channel in self.channels)


class Load:
    """The publishers, consumers and monitors of one trial."""

    def __init__(
        self,
        history: History,
        members: list[Member],
        rng: random.Random,
        publishers: int = 3,
        rate: float = 1500.0,
        rdy: int = 50,
        sizes: tuple[int, int] = (40, 1024),
    ) -> None:
        self.history = history
        self.members = members
        self.rng = rng
        self.rate = rate
        self.rdy = rdy
        self.sizes = sizes
        self.stop_publishing = threading.Event()
        self.stop_all = threading.Event()
        seeds = [rng.random() for _ in range(publishers + len(members))]
        self.threads = [
            threading.Thread(
                target=self._publish,
                args=(random.Random(seeds[i]), rate / publishers, i),
                daemon=True,
            )
            for i in range(publishers)
        ]
        self.publisher_threads = list(self.threads)
        self.threads += [
            threading.Thread(target=self._consume, args=(m,), daemon=True) for m in members
        ]
        self.threads += [
            threading.Thread(target=self._monitor, args=(m,), daemon=True) for m in members
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def start_backlog(self) -> None:
        """Start consuming the backlog channel (on every member)."""
        for member in self.members:
            thread = threading.Thread(
                target=self._consume, args=(member, BACKLOG_CHANNEL), daemon=True
            )
            self.threads.append(thread)
            thread.start()

    def stop_publishers(self) -> None:
        self.stop_publishing.set()
        for thread in self.publisher_threads:
            thread.join(15)

    def stop(self) -> None:
        self.stop_publishing.set()
        self.stop_all.set()
        for thread in self.threads:
            thread.join(15)

    # -- publishers ----------------------------------------------------------------------

    def _record(self, seqs: list[int], status: str, answered: float | None) -> None:
        with self.history.lock:
            for seq in seqs:
                self.history.status[seq] = status
                sent = self.history.times[seq][0]
                self.history.times[seq] = (sent, answered)

    def _publish(self, rng: random.Random, rate: float, first: int) -> None:
        history = self.history
        member = self.members[first % len(self.members)]
        while not self.stop_publishing.is_set():
            try:
                conn = NSQConn(member.client_address, timeout=3)
            except OSError:
                time.sleep(0.1)
                member = rng.choice(self.members)
                continue
            conn.sock.settimeout(PUBLISH_TIMEOUT)
            try:
                while not self.stop_publishing.is_set():
                    count = rng.choice([1, 1, 1, 2, 5, 20])
                    seqs = history.allocate(count)
                    bodies = [make_body(history.tag, s, rng.randint(*self.sizes)) for s in seqs]
                    sent = time.monotonic()
                    with history.lock:
                        for seq in seqs:
                            history.status[seq] = "pending"
                            history.times[seq] = (sent, None)
                            history.via[seq] = member.index
                    try:
                        conn.send(pub(TOPIC, bodies[0]) if count == 1 else mpub(TOPIC, bodies))
                        frame_type, data = conn.read_frame(timeout=PUBLISH_TIMEOUT)
                    except Exception:  # no answer: closed, reset, timeout, garbage
                        self._record(seqs, "unknown", None)
                        break
                    now = time.monotonic()
                    if frame_type == FRAME_TYPE_RESPONSE and data == b"OK":
                        self._record(seqs, "ok", now)
                    else:
                        status = "error" if frame_type == FRAME_TYPE_ERROR else "unknown"
                        self._record(seqs, status, now)
                        break
                    pause = count / rate - (time.monotonic() - sent)
                    if pause > 0:
                        time.sleep(pause)
            finally:
                conn.close()
            time.sleep(0.05)
            member = rng.choice(self.members)

    # -- consumers -----------------------------------------------------------------------

    def _consume(self, member: Member, channel: str = CHANNEL) -> None:
        history = self.history
        while not self.stop_all.is_set():
            try:
                conn = NSQConn(member.client_address, timeout=3)
            except OSError:
                time.sleep(0.1)
                continue
            opened = time.monotonic()
            try:
                conn.sub(TOPIC, channel)
                conn.rdy(self.rdy)
                while not self.stop_all.is_set():
                    try:
                        frame_type, data = conn.read_frame(0.2)
                    except TimeoutError:
                        continue
                    if frame_type != FRAME_TYPE_MESSAGE:
                        continue  # E_FIN_FAILED and the like (not fatal) or a stray OK
                    now = time.monotonic()
                    try:
                        message = decode_message(data)
                    except ValueError:
                        with history.lock:
                            history.notes.append(f"malformed message frame from n{member.node_id}")
                        continue
                    body = bytes(message.body)
                    delivery = Delivery(now, member.index, body, message.attempts, opened, channel)
                    with history.lock:
                        history.deliveries.append(delivery)
                    conn.fin(message.id)
            except Exception:  # closed, reset, refused SUB, garbage: connect again
                time.sleep(0.1)
            finally:
                conn.close()

    # -- monitor -------------------------------------------------------------------------

    def _monitor(self, member: Member) -> None:
        samples = self.history.samples[member.index]
        while not self.stop_all.is_set():
            t0 = time.monotonic()
            info: dict[str, Any] | None = member.replication(timeout=0.5)
            t1 = time.monotonic()
            role = info.get("role") if info else None
            epoch = info.get("epoch") if info else None
            samples.append(Sample(t0, t1, role, int(epoch) if epoch is not None else None))
            rest = POLL_INTERVAL - (t1 - t0)
            if rest > 0:
                self.stop_all.wait(rest)
