#!/usr/bin/env python3
"""Client libraries side by side: trionsq.client under asyncio and under Trio, ansq (asyncio)
and pynsq (tornado), against one trionsq nsqd, in alternating rounds of one run.

    bench/client_backends.py [--count 20000] [--rounds 3] [--baseline PATH]
                             [--only NAME[,NAME]]

Three figures per client, each in a fresh subprocess (one client in memory at a time):

* ``pub1``: single PUBs from one task, each OK awaited before the next (the round trip a web
  request that publishes makes);
* ``pub100``: single PUBs from 100 tasks at once, each awaiting its OK before its next (a busy
  web server: trionsq.client coalesces them into MPUBs; pynsq keeps 100 outstanding);
* ``mpub``: MPUBs of 100 messages, 4 outstanding;
* ``consume``: a topic holding ``--count`` messages read with RDY 2500, each FINned.

``--baseline PATH`` adds a ``trionsq-trio@base`` client: the same Trio worker with PATH (a
checkout, e.g. ``git worktree add /tmp/base <commit>``) first on ``sys.path``, to compare the
client with an older one in the same run. ansq's Reader sends RDY 1 and cannot change it
(``set_max_in_flight`` is not implemented): the bench sends RDY 2500 on its connection itself.
Each figure is the median over the rounds, with the client process's CPU per message; the
clients run in one order, then the reverse, and so on. The daemon is the same for everyone,
so the ratios are the libraries'.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trionsq.testing import DaemonProcess  # noqa: E402

CLIENTS = ["trionsq-asyncio", "trionsq-trio", "ansq", "pynsq"]
PHASES = ["pub1", "pub100", "mpub", "consume"]

# Each worker: argv = address topic count; prints one JSON line {phase: [rate, cpu_us]}.
_TRIONSQ = r"""
import json, sys, time
import anyio
from trionsq.client import Consumer, Producer
backend, address, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
body = b"x" * 100
out = {}
def record(name, n, t, c):
    out[name] = [n / (time.perf_counter() - t), (time.process_time() - c) / n * 1e6]
async def main():
    async with Producer(address, max_pipeline=4) as p:
        await p.pub(topic, body)
        t, c = time.perf_counter(), time.process_time()
        for _ in range(count):
            await p.pub(topic, body)
        record("pub1", count, t, c)
        t, c = time.perf_counter(), time.process_time()
        async def singles(n):
            for _ in range(n):
                await p.pub(topic, body)
        async with anyio.create_task_group() as tasks:
            for _ in range(100):
                tasks.start_soon(singles, count // 100)
        record("pub100", count // 100 * 100, t, c)
        t, c = time.perf_counter(), time.process_time()
        async def batches(n):
            for _ in range(n):
                await p.mpub(topic, [body] * 100)
        async with anyio.create_task_group() as tasks:
            for _ in range(4):
                tasks.start_soon(batches, count // 400)
        record("mpub", count // 400 * 400, t, c)
    expected = 1 + count + count // 100 * 100 + count // 400 * 400
    got = 0
    t, c = time.perf_counter(), time.process_time()
    async with Consumer(topic, "ch", nsqd_tcp_addresses=[address], max_in_flight=2500) as consumer:
        async for message in consumer:
            message.finish()
            got += 1
            if got == expected:
                break
        record("consume", got, t, c)
anyio.run(main, backend=backend)
print(json.dumps(out))
"""

_ANSQ = r"""
import asyncio, json, sys, time
import ansq
address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
host, port = address.rsplit(":", 1)
body = b"x" * 100
out = {}
def record(name, n, t, c):
    out[name] = [n / (time.perf_counter() - t), (time.process_time() - c) / n * 1e6]
async def main():
    conn = await ansq.open_connection(host, int(port))
    await conn.pub(topic, body)
    t, c = time.perf_counter(), time.process_time()
    for _ in range(count):
        await conn.pub(topic, body)
    record("pub1", count, t, c)
    t, c = time.perf_counter(), time.process_time()
    async def singles(n):
        for _ in range(n):
            await conn.pub(topic, body)
    await asyncio.gather(*(singles(count // 100) for _ in range(100)))
    record("pub100", count // 100 * 100, t, c)
    t, c = time.perf_counter(), time.process_time()
    async def batches(n):
        for _ in range(n):
            await conn.mpub(topic, *([body] * 100))
    await asyncio.gather(*(batches(count // 400) for _ in range(4)))
    record("mpub", count // 400 * 400, t, c)
    await conn.close()
    expected = 1 + count + count // 100 * 100 + count // 400 * 400
    got = 0
    t, c = time.perf_counter(), time.process_time()
    reader = await ansq.create_reader(topic=topic, channel="ch", nsqd_tcp_addresses=[address])
    for connection in reader.connections:  # Reader.set_max_in_flight is not implemented
        await connection.rdy(2500)
    async for message in reader.messages():
        await message.fin()
        got += 1
        if got == expected:
            break
    record("consume", got, t, c)
    await reader.close()
asyncio.run(main())
print(json.dumps(out))
"""

_PYNSQ = r"""
import json, sys, time
import nsq, tornado.ioloop
address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
loop = tornado.ioloop.IOLoop.current()
body = b"x" * 100
out = {}
state = {"sent": 0, "acked": 0, "got": 0}
def timed(name, n, start):
    t, c = time.perf_counter(), time.process_time()
    loop.add_callback(start)
    loop.start()
    out[name] = [n / (time.perf_counter() - t), (time.process_time() - c) / n * 1e6]
writer = nsq.Writer([address])
def wait_connected():
    if writer.conns:
        writer.pub(topic, body, callback=lambda conn, data: loop.stop())
    else:
        loop.call_later(0.02, wait_connected)
loop.add_callback(wait_connected)
loop.start()
def one_by_one():
    def done(conn, data):
        state["acked"] += 1
        if state["acked"] == count:
            loop.stop()
        else:
            writer.pub(topic, body, callback=done)
    writer.pub(topic, body, callback=done)
timed("pub1", count, one_by_one)
singles = count // 100 * 100
def hundred_outstanding():
    state["sent"] = state["acked"] = 0
    def done(conn, data):
        state["acked"] += 1
        if state["acked"] == singles:
            loop.stop()
        elif state["sent"] < singles:
            send()
    def send():
        state["sent"] += 1
        writer.pub(topic, body, callback=done)
    for _ in range(100):
        send()
timed("pub100", singles, hundred_outstanding)
batches = count // 400 * 4
def in_batches():
    state["sent"] = state["acked"] = 0
    def done(conn, data):
        state["acked"] += 1
        if state["acked"] == batches:
            loop.stop()
        elif state["sent"] < batches:
            send()
    def send():
        state["sent"] += 1
        writer.mpub(topic, [body] * 100, callback=done)
    for _ in range(4):
        send()
timed("mpub", batches * 100, in_batches)
expected = 1 + count + singles + batches * 100
def handler(message):
    state["got"] += 1
    if state["got"] == expected:
        loop.stop()
    return True
def start_reader():
    nsq.Reader(topic=topic, channel="ch", nsqd_tcp_addresses=[address], max_in_flight=2500,
               message_handler=handler)
timed("consume", expected, start_reader)
print(json.dumps(out))
"""


def _worker(client: str, address: str, topic: str, count: int, baseline: str | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    if client == "ansq":
        argv = [sys.executable, "-c", _ANSQ, address, topic, str(count)]
    elif client == "pynsq":
        argv = [sys.executable, "-c", _PYNSQ, address, topic, str(count)]
    else:
        backend = "asyncio" if client == "trionsq-asyncio" else "trio"
        argv = [sys.executable, "-c", _TRIONSQ, backend, address, topic, str(count)]
        if client.endswith("@base"):
            assert baseline is not None
            env["PYTHONPATH"] = baseline
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, cwd="/")
    if done.returncode != 0:
        raise SystemExit(f"{client} failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", help="a checkout whose trionsq.client is compared")
    parser.add_argument("--only", help="comma-separated clients")
    args = parser.parse_args()
    clients = list(CLIENTS)
    if args.baseline:
        clients.insert(2, "trionsq-trio@base")
    if args.only:
        clients = [c for c in clients if c in args.only.split(",")]
    results: dict[str, list[dict]] = {c: [] for c in clients}
    load = os.getloadavg()[0]
    with DaemonProcess("nsqd", args=["--mem-queue-size=10000000"]) as nsqd:
        host, port = nsqd.tcp_address
        address = f"{host}:{port}"
        for round_ in range(args.rounds):
            # the order flips each round: no client always follows the same one
            for client in clients if round_ % 2 == 0 else clients[::-1]:
                topic = f"bench_{client.replace('-', '_').replace('@', '_')}_{round_}"
                started = time.perf_counter()
                results[client].append(_worker(client, address, topic, args.count, args.baseline))
                print(
                    f"round {round_ + 1} {client}: {time.perf_counter() - started:.1f} s",
                    file=sys.stderr,
                )
    print(
        f"count {args.count}, rounds {args.rounds}, load average {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after; medians; msg/s (client CPU µs/msg)"
    )
    header = f"{'client':20}" + "".join(f"{p:>22}" for p in PHASES)
    print(header)
    medians: dict[str, dict[str, float]] = {}
    for client in clients:
        row = f"{client:20}"
        medians[client] = {}
        for phase in PHASES:
            rate = statistics.median(r[phase][0] for r in results[client])
            cpu = statistics.median(r[phase][1] for r in results[client])
            medians[client][phase] = rate
            row += f"{rate:>12,.0f} ({cpu:6.1f})"
        print(row)
    for ours in ("trionsq-asyncio", "trionsq-trio"):
        for other in ("ansq", "pynsq", "trionsq-trio@base"):
            if ours in medians and other in medians and ours != other:
                ratios = ", ".join(
                    f"{p} {medians[ours][p] / medians[other][p]:.2f}x" for p in PHASES
                )
                print(f"{ours} / {other}: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
