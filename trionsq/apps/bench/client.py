"""Client-library bench: publish and consume throughput of trionsq.client against a trionsq
nsqd, side by side with pynsq (Writer/Reader on tornado, in a subprocess) in the same run, with
the same message size, MPUB batch and in-flight settings; prints the ratios of throughput and of
client CPU per message. Three phases: MPUBs of --batch-size with --inflight outstanding; single
PUBs with --batch-size outstanding (pynsq pipelines them, trionsq.client coalesces concurrent
pub() calls into MPUBs); consuming all of them. Throughput is capped by the daemon when both
clients keep it busy; client CPU per message is what the library costs.

``python -m trionsq.apps.bench.client [--count N] [--size B] [--batch-size N]
[--inflight N] [--max-in-flight N]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence

import trio

from ...client import Consumer, Message, Producer
from ...testing import DaemonProcess

_PYNSQ = r"""
import json, sys, time
import nsq, tornado.ioloop
addr, topic, count, size, batch, inflight, mif = sys.argv[1:8]
count, size, batch, inflight, mif = map(int, (count, size, batch, inflight, mif))
loop = tornado.ioloop.IOLoop.current()
body = b"x" * size
state = {"sent": 0, "acked": 0, "got": 0}
result = {}
def timed(name, n, start_fn):
    # run the loop until stopped; rate and client CPU per message
    t, c = time.perf_counter(), time.process_time()
    loop.add_callback(start_fn)
    loop.start()
    secs, cpu = time.perf_counter() - t, time.process_time() - c
    result[name] = n / secs
    result[name + "_cpu_us"] = cpu / n * 1e6
def make_publisher(per_command, outstanding):
    state["sent"] = state["acked"] = 0
    def done(conn, data):
        state["acked"] += per_command
        if state["acked"] >= count:
            loop.stop()
        elif state["sent"] < count:
            send()
    def send():
        state["sent"] += per_command
        if per_command == 1:
            writer.pub(topic, body, callback=done)
        else:
            writer.mpub(topic, [body] * per_command, callback=done)
    def start():
        for _ in range(outstanding):
            send()
    return start
writer = nsq.Writer([addr])
def wait_connected():
    if not writer.conns:
        loop.call_later(0.05, wait_connected)
    else:
        loop.stop()
loop.add_callback(wait_connected)
loop.start()
timed("publish", count, make_publisher(batch, inflight))
timed("pub", count, make_publisher(1, batch))
def handler(message):
    state["got"] += 1
    if state["got"] >= 2 * count:
        loop.stop()
    return True
def start_reader():
    nsq.Reader(topic=topic, channel="ch", nsqd_tcp_addresses=[addr], max_in_flight=mif,
               message_handler=handler)
timed("consume", 2 * count, start_reader)
print(json.dumps(result))
"""

KEYS = ("publish", "pub", "consume")
LABELS = {"publish": "publish (MPUB)", "pub": "publish (PUB)", "consume": "consume"}


async def _ours(address: str, topic: str, args: argparse.Namespace) -> dict[str, float]:
    body = b"x" * args.size
    count = args.count
    result: dict[str, float] = {}

    def record(name: str, n: int, start: float, cpu: float) -> None:
        result[name] = n / (time.perf_counter() - start)
        result[name + "_cpu_us"] = (time.process_time() - cpu) / n * 1e6

    async with Producer(address, max_pipeline=args.inflight) as producer:
        await producer.pub(topic, body)  # connected before timing, as pynsq's side waits too
        batches = count // args.batch_size
        start, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as nursery:
            per_task = batches // args.inflight

            async def publish_batches(n: int) -> None:
                for _ in range(n):
                    await producer.mpub(topic, [body] * args.batch_size)

            for i in range(args.inflight):
                nursery.start_soon(
                    publish_batches, per_task + (1 if i < batches % args.inflight else 0)
                )
        record("publish", batches * args.batch_size, start, cpu)
        # single PUBs, `batch_size` callers at a time (the library coalesces them)
        start, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as nursery:
            per_task = count // args.batch_size

            async def publish_singles() -> None:
                for _ in range(per_task):
                    await producer.pub(topic, body)

            for _ in range(args.batch_size):
                nursery.start_soon(publish_singles)
        record("pub", per_task * args.batch_size, start, cpu)
    expected = 1 + batches * args.batch_size + per_task * args.batch_size
    done = trio.Event()
    got = 0

    async def handler(message: Message) -> None:
        nonlocal got
        got += 1
        if got >= expected:
            done.set()

    start, cpu = time.perf_counter(), time.process_time()
    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[address], max_in_flight=args.max_in_flight
    ) as consumer:
        await done.wait()
        record("consume", got, start, cpu)
        await consumer.close()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trionsq bench client", description=__doc__)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=4, help="outstanding MPUBs")
    parser.add_argument("--max-in-flight", type=int, default=2500, help="consumer RDY")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.count -= args.count % args.batch_size
    with DaemonProcess("nsqd", args=["--mem-queue-size=10000000"]) as nsqd:
        host, port = nsqd.tcp_address
        address = f"{host}:{port}"
        ours = trio.run(_ours, address, "client_bench_trionsq", args)
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                _PYNSQ,
                address,
                "client_bench_pynsq",
                str(args.count),
                str(args.size),
                str(args.batch_size),
                str(args.inflight),
                str(args.max_in_flight),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        pynsq = json.loads(out.stdout.strip().splitlines()[-1])
    result = {
        "settings": vars(args),
        "trionsq": ours,
        "pynsq": pynsq,
        "ratio": {k: ours[k] / pynsq[k] for k in KEYS},
        "cpu_ratio": {k: pynsq[k + "_cpu_us"] / ours[k + "_cpu_us"] for k in KEYS},
    }
    print(
        f"{'':18}{'trionsq.client':>16}{'pynsq':>12}{'ratio':>7}"
        f"{'client CPU µs/msg (ours / pynsq)':>36}{'CPU ratio':>11}"
    )
    for key in KEYS:
        print(
            f"{LABELS[key]:18}{ours[key]:>14,.0f}/s{pynsq[key]:>10,.0f}/s"
            f"{result['ratio'][key]:>6.1f}x"
            f"{ours[key + '_cpu_us']:>24.2f} / {pynsq[key + '_cpu_us']:<9.2f}"
            f"{result['cpu_ratio'][key]:>10.1f}x"
        )
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
