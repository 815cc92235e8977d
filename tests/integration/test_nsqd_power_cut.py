"""--sync-ack against a power cut: nsqd runs on a `SimulatedDisk` (the fault-injection layer
under the disk queues and nsqd.dat) while publishers send PUB, MPUB and DPUB and a consumer
finishes, requeues (with a delay) and holds messages; the power is cut at a random moment,
which drops every write not yet fsynced (tearing some); a new nsqd on what survived must
deliver every message that was answered OK, none before its due time.

Every OK counts, even one read after the cut: with --sync-ack nsqd answers only after the
fsync that made the message durable, and after the cut every fsync fails, so an OK proves the
message reached the platter. Without --sync-ack the same cut loses acknowledged messages (the
last test), which shows the fault layer does drop what an fsync did not cover.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

import pytest
import trio

from tests.nsqd_harness import Conn
from trionsq.diskqueue.simulated import SimulatedDisk
from trionsq.nsqd.nsqd import NSQD
from trionsq.nsqd.options import NSQDOptions
from trionsq.protocol import (
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    decode_message,
    dpub,
    fin,
    mpub,
    pub,
    rdy,
    req,
    sub,
)

DATA = "/data"
TOPIC, CHANNEL = "powercut", "c"
PUBLISHERS = 4


def _options(**overrides: Any) -> NSQDOptions:
    return dataclasses.replace(
        NSQDOptions(),
        tcp_address="127.0.0.1:0",
        http_address="",
        data_path=DATA,
        node_id=3,
        **overrides,
    )


class Load:
    """What the publishers had acknowledged, and when each message may first be delivered."""

    def __init__(self) -> None:
        self.acked: set[bytes] = set()
        #: FIN sent (such a message need not come back, though it may).
        self.finished: set[bytes] = set()
        #: Body -> wall time before which it must not be delivered (DPUB; REQ with a delay
        #: once a later OK on the same connection proves nsqd executed it).
        self.not_before: dict[bytes, float] = {}
        self.deferred = 0
        self.requeued = 0


async def _publish(nsqd: NSQD, load: Load, rng: random.Random, tag: int) -> None:
    conn = await Conn.open(nsqd)
    n = 0
    try:
        while True:
            kind = rng.choice(["pub", "mpub", "dpub"])
            bodies = [b"p%d-%d" % (tag, n + i) for i in range(20 if kind == "mpub" else 1)]
            n += len(bodies)
            defer_ms = rng.randint(300, 1500)
            sent_at = time.time()
            if kind == "dpub":
                await conn.send(dpub(TOPIC, defer_ms, bodies[0]))
            elif kind == "mpub":
                await conn.send(mpub(TOPIC, bodies))
            else:
                await conn.send(pub(TOPIC, bodies[0]))
            if await conn.frame() != (FRAME_TYPE_RESPONSE, b"OK"):
                return  # E_PUB_FAILED: the disk is gone
            if kind == "dpub":
                load.not_before[bodies[0]] = sent_at + defer_ms / 1000
                load.deferred += 1
            load.acked.update(bodies)
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def _consume(nsqd: NSQD, load: Load, rng: random.Random) -> None:
    conn = await Conn.open(nsqd)
    # REQs not yet confirmed by the OK of the PUB sent after each on this connection.
    unconfirmed: list[tuple[bytes, float]] = []
    try:
        await conn.send(sub(TOPIC, CHANNEL) + rdy(20))
        assert await conn.response() == b"OK"
        while True:
            frame_type, data = await conn.frame()
            if frame_type == FRAME_TYPE_RESPONSE:
                if data != b"OK":
                    continue
                body, due = unconfirmed.pop(0)
                load.not_before[body] = due
                load.requeued += 1
                continue
            if frame_type != FRAME_TYPE_MESSAGE:
                return
            message = decode_message(data)
            load.not_before.pop(bytes(message.body), None)  # delivered: its bound was met
            roll = rng.random()
            if roll < 0.1:
                continue  # held in flight until the cut
            if roll < 0.3:
                delay_ms = rng.randint(300, 1200)
                unconfirmed.append((bytes(message.body), time.time() + delay_ms / 1000))
                await conn.send(req(message.id, delay_ms) + pub("powercut-markers", b"m"))
            else:
                load.finished.add(bytes(message.body))
                await conn.send(fin(message.id))
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def _run_until_cut(
    disk: SimulatedDisk, options: NSQDOptions, rng: random.Random
) -> tuple[Load, SimulatedDisk]:
    """Serve the load on `disk`, cut the power at a random moment; the disk that survived."""
    load = Load()
    survivor: SimulatedDisk | None = None
    # After the cut the disk answers every call with EIO: the daemon keeps running (reads are
    # retried, writes refused), so nothing here may end it.
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nsqd = NSQD(options, fs=disk)
            await nursery.start(nsqd.run)
            for tag in range(PUBLISHERS):
                nursery.start_soon(_publish, nsqd, load, random.Random(rng.random()), tag)
            nursery.start_soon(_consume, nsqd, load, random.Random(rng.random()))
            await trio.sleep(rng.uniform(0.3, 1.2))
            survivor = disk.power_cut(rng, torn=True)
            # Answers in flight when the power went out still arrive (an OK read now proves
            # an fsync before the cut); then the machine is off.
            await trio.sleep(0.2)
            scope.cancel()
    assert survivor is not None
    return load, survivor


async def _drain(
    disk: SimulatedDisk, options: NSQDOptions, expected: set[bytes], patience: float
) -> dict[bytes, float]:
    """Start nsqd on `disk` and consume until everything expected arrived (or `patience`
    seconds pass); each body's first arrival (wall time)."""
    arrived: dict[bytes, float] = {}
    async with trio.open_nursery() as nursery:
        nsqd = NSQD(options, fs=disk)
        await nursery.start(nsqd.run)
        conn = await Conn.open(nsqd)
        await conn.send(sub(TOPIC, CHANNEL) + rdy(500))
        assert await conn.response() == b"OK"
        with trio.move_on_after(patience):
            while not expected <= arrived.keys():
                message = await conn.message()
                arrived.setdefault(bytes(message.body), time.time())
                await conn.send(fin(message.id))
        nsqd.request_exit()
    return arrived


@pytest.mark.parametrize("seed", range(3))
async def test_sync_ack_keeps_every_acknowledged_message_across_a_power_cut(seed: int) -> None:
    rng = random.Random(seed)
    options = _options(sync_ack=True, sync_timeout=rng.choice([0.05, 2.0]))
    load, survivor = await _run_until_cut(SimulatedDisk(), options, rng)
    assert len(load.acked) > 50, "the load published too little to test anything"
    owed = load.acked - load.finished
    arrived = await _drain(survivor, options, owed, patience=20)
    lost = owed - arrived.keys()
    assert not lost, (
        f"{len(lost)} of {len(load.acked)} acknowledged messages lost ({load.deferred} DPUBs, "
        f"{load.requeued} REQs with a delay), e.g. {sorted(lost)[:5]}"
    )
    early = {
        body: round(bound - arrived[body], 3)
        for body, bound in load.not_before.items()
        if body in arrived and arrived[body] < bound - 0.02
    }
    assert not early, f"delivered before their due time (seconds early): {early}"


async def test_without_sync_ack_a_power_cut_loses_acknowledged_messages() -> None:
    """The control: --mem-queue-size=0 alone answers once the message is written, before any
    fsync (as Go nsqd), so cutting the power before the next sync loses what was answered."""
    disk = SimulatedDisk()
    options = _options(mem_queue_size=0, sync_timeout=60.0)
    acked: set[bytes] = set()
    async with trio.open_nursery() as nursery:
        nsqd = NSQD(options, fs=disk)
        await nursery.start(nsqd.run)
        conn = await Conn.open(nsqd)
        bodies = [b"m%d" % i for i in range(10)]
        await conn.send(mpub(TOPIC, bodies))
        assert await conn.response() == b"OK"
        acked.update(bodies)
        survivor = disk.power_cut()
        nursery.cancel_scope.cancel()
    arrived = await _drain(survivor, options, acked, patience=1)
    assert acked - arrived.keys() == acked
