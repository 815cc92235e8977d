#!/usr/bin/env python3
"""Blocking publish from synchronous code: single-message PUBs, each OK awaited before the next,
with trionsq's `SyncProducer` side by side with pynsq's `Writer` and gnsq's `Producer` (issue
35), against one trionsq nsqd in the same run.

    bench/sync_publish.py [--count 20000] [--rounds 3] [--threads 8] [--size 100]

One nsqd (``--mem-queue-size=10000000``: every message stays in memory) serves every round;
each round runs each client once, in a fresh subprocess, the order rotated from round to
round. Each client connects and publishes one message before the clock starts, then publishes
``--count`` messages of ``--size`` bytes to its own topic, one at a time, each OK awaited:

* ``SyncProducer, 1 thread``: ``producer.publish(topic, body)`` in a loop;
* ``SyncProducer, N threads``: ``--threads`` threads share one SyncProducer, each publishing
  ``count / threads`` that way (they take turns on its one connection, one PUB on the wire at
  a time: this row measures the lock's hand-over between threads, not more throughput);
* ``pynsq Writer``: tornado, the next ``writer.pub`` issued from the previous one's callback;
* ``gnsq Producer``: gevent (monkey-patched, in its subprocess), ``producer.publish`` blocks
  until the response;
* references: trionsq's async ``Producer`` awaiting each ``pub`` in turn, and a blocking socket
  that writes one PUB and reads the OK (nsqd and the kernel, no client library): what
  SyncProducer, which does the same in the caller's thread, adds a lock, a non-blocking look
  for heartbeats and the frame decoding to.

Prints the median rate (msg/s) with each round's, the median client CPU per message (every
thread of the client process, from ``time.process_time``) and the ratios of SyncProducer to
pynsq and to gnsq, plus the load average before and after: on a shared 2-core machine other
work shows in the figures. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from trionsq.testing import DaemonProcess, pythonpath_env

# Each client's program: argv is ADDRESS TOPIC COUNT SIZE THREADS; prints {"rate", "cpu_us"}.

_SYNC = r"""
import json, sys, threading, time
from trionsq.client.sync_producer import SyncProducer
addr, topic = sys.argv[1:3]
count, size, threads = map(int, sys.argv[3:6])
body = b"x" * size
per_thread = count // threads
with SyncProducer(addr) as producer:
    producer.publish(topic, body)
    go = threading.Barrier(threads + 1)
    def publish():
        go.wait()
        for _ in range(per_thread):
            producer.publish(topic, body)
    workers = [threading.Thread(target=publish) for _ in range(threads)]
    for worker in workers:
        worker.start()
    t, c = time.perf_counter(), time.process_time()
    go.wait()
    for worker in workers:
        worker.join()
    secs, cpu = time.perf_counter() - t, time.process_time() - c
n = per_thread * threads
print(json.dumps({"rate": n / secs, "cpu_us": cpu / n * 1e6}))
"""

_ASYNC = r"""
import json, sys, time
import trio
from trionsq.client import Producer
addr, topic = sys.argv[1:3]
count, size = map(int, sys.argv[3:5])
body = b"x" * size
async def main():
    async with Producer(addr) as producer:
        await producer.pub(topic, body)
        t, c = time.perf_counter(), time.process_time()
        for _ in range(count):
            await producer.pub(topic, body)
        return time.perf_counter() - t, time.process_time() - c
secs, cpu = trio.run(main)
print(json.dumps({"rate": count / secs, "cpu_us": cpu / count * 1e6}))
"""

_RAW = r"""
import json, socket, struct, sys, time
addr, topic = sys.argv[1:3]
count, size = map(int, sys.argv[3:5])
host, _, port = addr.rpartition(":")
sock = socket.create_connection((host, int(port)))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
sock.sendall(b"  V2")
command = b"PUB " + topic.encode() + b"\n" + struct.pack(">I", size) + b"x" * size
buf = b""
def read_frame():
    global buf
    while True:
        if len(buf) >= 4:
            n = struct.unpack_from(">I", buf)[0]
            if len(buf) >= 4 + n:
                frame, buf = buf[4:4 + n], buf[4 + n:]
                return frame
        buf += sock.recv(65536)
def publish():
    sock.sendall(command)
    while True:
        frame = read_frame()
        if frame[4:] == b"_heartbeat_":
            sock.sendall(b"NOP\n")
            continue
        if frame != b"\x00\x00\x00\x00OK":
            raise SystemExit(f"unexpected answer {frame!r}")
        return
publish()
t, c = time.perf_counter(), time.process_time()
for _ in range(count):
    publish()
secs, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"rate": count / secs, "cpu_us": cpu / count * 1e6}))
"""

_PYNSQ = r"""
import json, sys, time
import nsq, tornado.ioloop
addr, topic = sys.argv[1:3]
count, size = map(int, sys.argv[3:5])
body = b"x" * size
loop = tornado.ioloop.IOLoop.current()
writer = nsq.Writer([addr])
state = {"acked": 0, "error": None}
def wait_connected():
    if not writer.conns:
        loop.call_later(0.01, wait_connected)
    else:
        loop.stop()
loop.add_callback(wait_connected)
loop.start()
def done(conn, data):
    if isinstance(data, Exception):
        state["error"] = repr(data)
        loop.stop()
        return
    state["acked"] += 1
    if state["acked"] > count:
        loop.stop()
    else:
        writer.pub(topic, body, callback=done)
# the first message (acked == 0) is untimed, as the other clients' is
def first(conn, data):
    global t, c
    if isinstance(data, Exception):
        state["error"] = repr(data)
        loop.stop()
        return
    state["acked"] = 1
    t, c = time.perf_counter(), time.process_time()
    writer.pub(topic, body, callback=done)
loop.add_callback(lambda: writer.pub(topic, body, callback=first))
loop.start()
secs, cpu = time.perf_counter() - t, time.process_time() - c
if state["error"]:
    raise SystemExit(state["error"])
print(json.dumps({"rate": count / secs, "cpu_us": cpu / count * 1e6}))
"""

_GNSQ = r"""
from gevent import monkey
monkey.patch_all()
import json, sys, time
import gnsq
addr, topic = sys.argv[1:3]
count, size = map(int, sys.argv[3:5])
body = b"x" * size
producer = gnsq.Producer(nsqd_tcp_addresses=[addr])
producer.start()
producer.publish(topic, body)
t, c = time.perf_counter(), time.process_time()
for _ in range(count):
    producer.publish(topic, body)
secs, cpu = time.perf_counter() - t, time.process_time() - c
producer.close()
producer.join()
print(json.dumps({"rate": count / secs, "cpu_us": cpu / count * 1e6}))
"""


def _clients(threads: int) -> dict[str, tuple[str, int]]:
    """Row label -> (program, threads)."""
    return {
        "SyncProducer, 1 thread": (_SYNC, 1),
        f"SyncProducer, {threads} threads": (_SYNC, threads),
        "pynsq Writer": (_PYNSQ, 1),
        "gnsq Producer": (_GNSQ, 1),
        "ref: async Producer": (_ASYNC, 1),
        "ref: blocking socket": (_RAW, 1),
    }


def _run_client(
    program: str, address: str, topic: str, count: int, size: int, threads: int
) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", program, address, topic, str(count), str(size), str(threads)],
        env=pythonpath_env(),
        capture_output=True,
        text=True,
        timeout=60 + count / 100,
    )
    if done.returncode != 0:
        raise RuntimeError(f"client for {topic} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="messages per client run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8, help="threads of the N-thread row")
    parser.add_argument("--size", type=int, default=100, help="message body bytes")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args(argv)
    clients = _clients(args.threads)
    results: dict[str, list[dict[str, float]]] = {label: [] for label in clients}
    load_before = _load()
    started = time.monotonic()
    with DaemonProcess("nsqd", args=["--mem-queue-size=10000000"], env=pythonpath_env()) as nsqd:
        address = "{}:{}".format(*nsqd.tcp_address)
        labels = list(clients)
        for round_no in range(args.rounds):
            shift = round_no % len(labels)
            for label in labels[shift:] + labels[:shift]:
                program, threads = clients[label]
                topic = "sync_bench_" + "".join(ch for ch in label if ch.isalnum())
                result = _run_client(program, address, topic, args.count, args.size, threads)
                results[label].append(result)
                print(
                    f"round {round_no + 1} {label:<26}{result['rate']:>9,.0f} msg/s"
                    f"{result['cpu_us']:>8.1f} µs/msg CPU",
                    file=sys.stderr,
                    flush=True,
                )
    load_after = _load()
    rate = {k: statistics.median(r["rate"] for r in v) for k, v in results.items()}
    cpu = {k: statistics.median(r["cpu_us"] for r in v) for k, v in results.items()}
    print(
        f"{args.count:,} PUBs of {args.size} B per run, each OK awaited; median of "
        f"{args.rounds} rounds; {time.monotonic() - started:.0f} s; load average "
        f"{load_before} before, {load_after} after; {os.cpu_count()} CPUs"
    )
    print(f"{'client':<28}{'msg/s':>9}  {'rounds (msg/s)':<28}{'client CPU µs/msg':>18}")
    for label, runs in results.items():
        shown = ", ".join(f"{r['rate']:,.0f}" for r in runs)
        print(f"{label:<28}{rate[label]:>9,.0f}  {shown:<28}{cpu[label]:>18.1f}")
    sync_rows = [label for label in clients if label.startswith("SyncProducer")]
    for other in ("pynsq Writer", "gnsq Producer"):
        for label in sync_rows:
            print(
                f"{label} / {other}: rate {rate[label] / rate[other]:.2f}x, "
                f"CPU per message {cpu[label] / cpu[other]:.2f}x"
            )
    if args.json:
        print(json.dumps({"settings": vars(args), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
