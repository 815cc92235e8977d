"""An asyncio application: publish three messages, then consume them with a handler and stop
once all are handled. Run it beside an nsqd: ``NSQD_TCP_ADDRESS=127.0.0.1:4150 python
asyncio_app.py``."""

import asyncio
import os

from trionsq.client import Consumer, Message, Producer

NSQD = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")


async def main() -> None:
    async with Producer(NSQD) as producer:
        await producer.pub("orders", b"order 1")  # returns once nsqd said OK
        await producer.mpub("orders", [b"order 2", b"order 3"])  # all or none

    handled = []
    all_handled = asyncio.Event()

    async def handle(message: Message) -> None:
        # returning finishes the message (FIN); raising requeues it (REQ, with backoff)
        handled.append(message.body.decode())
        if len(handled) == 3:
            all_handled.set()

    async with Consumer("orders", "billing", handle, nsqd_tcp_addresses=[NSQD], max_in_flight=10):
        await all_handled.wait()
    # leaving `async with` stops gracefully: RDY 0, CLS, running handlers finish
    print("handled:", ", ".join(sorted(handled)))


asyncio.run(main())
