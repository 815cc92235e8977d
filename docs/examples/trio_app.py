"""The same application under Trio: publish three messages, consume them with a handler, stop
once all are handled. ``NSQD_TCP_ADDRESS=127.0.0.1:4150 python trio_app.py``."""

import os

import trio

from trionsq.client import Consumer, Message, Producer

NSQD = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")


async def main() -> None:
    async with Producer(NSQD) as producer:
        await producer.pub("orders", b"order 1")
        await producer.mpub("orders", [b"order 2", b"order 3"])
        await producer.dpub("orders", 100, b"order 4")  # delivered 100 ms from now

    handled = []
    all_handled = trio.Event()

    async def handle(message: Message) -> None:
        handled.append(message.body.decode())
        if len(handled) == 4:
            all_handled.set()

    async with Consumer("orders", "billing", handle, nsqd_tcp_addresses=[NSQD], max_in_flight=10):
        await all_handled.wait()
    print("handled:", ", ".join(sorted(handled)))


trio.run(main)
