"""Client-library bench: publish and consume throughput of trionsq.client against a trionsq
nsqd, side by side with pynsq (Writer/Reader on tornado, in a subprocess) in the same run, with
the same message size, MPUB batch and in-flight settings; prints the ratios.

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
def pub_done(conn, data):
    state["acked"] += batch
    if state["acked"] >= count:
        loop.stop()
    elif state["sent"] < count:
        send()
def send():
    state["sent"] += batch
    writer.mpub(topic, [body] * batch, callback=pub_done)
def start():
    if not writer.conns:
        loop.call_later(0.05, start); return
    for _ in range(inflight):
        send()
writer = nsq.Writer([addr])
loop.call_later(0.2, start)
t = time.perf_counter(); t0 = [None]
def go(): t0[0] = time.perf_counter()
loop.add_callback(go)
loop.start()
pub_secs = time.perf_counter() - t0[0] - 0.2
def handler(message):
    state["got"] += 1
    if state["got"] >= count:
        loop.stop()
    return True
reader = nsq.Reader(topic=topic, channel="ch", nsqd_tcp_addresses=[addr], max_in_flight=mif,
                    message_handler=handler)
t1 = time.perf_counter()
loop.start()
sub_secs = time.perf_counter() - t1
print(json.dumps({"publish": count / pub_secs, "consume": count / sub_secs}))
"""


async def _ours(address: str, topic: str, args: argparse.Namespace) -> dict[str, float]:
    body = b"x" * args.size
    batches = args.count // args.batch_size
    async with Producer(address, max_pipeline=args.inflight) as producer:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            per_task = batches // args.inflight

            async def publish(n: int) -> None:
                for _ in range(n):
                    await producer.mpub(topic, [body] * args.batch_size)

            for i in range(args.inflight):
                nursery.start_soon(publish, per_task + (1 if i < batches % args.inflight else 0))
        publish_rate = batches * args.batch_size / (time.perf_counter() - start)
    done = trio.Event()
    got = 0

    async def handler(message: Message) -> None:
        nonlocal got
        got += 1
        if got >= batches * args.batch_size:
            done.set()

    start = time.perf_counter()
    async with Consumer(
        topic, "ch", handler, nsqd_tcp_addresses=[address], max_in_flight=args.max_in_flight
    ) as consumer:
        await done.wait()
        consume_rate = got / (time.perf_counter() - start)
        await consumer.close()
    return {"publish": publish_rate, "consume": consume_rate}


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
        "ratio": {k: ours[k] / pynsq[k] for k in ("publish", "consume")},
    }
    print(f"{'':10}{'trionsq.client':>16}{'pynsq':>12}{'ratio':>8}")
    for key in ("publish", "consume"):
        print(f"{key:10}{ours[key]:>14,.0f}/s{pynsq[key]:>10,.0f}/s{result['ratio'][key]:>7.1f}x")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
