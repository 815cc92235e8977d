"""A long-running asyncio worker: consume until SIGTERM or SIGINT, then stop gracefully (no
new messages, handlers in progress finish, unstarted ones go back to nsqd at once).
``NSQD_TCP_ADDRESS=127.0.0.1:4150 python asyncio_worker.py``."""

import asyncio
import os
import signal

from trionsq.client import Consumer, Message

NSQD = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")


async def handle(message: Message) -> None:
    print("working on", message.body.decode(), flush=True)
    await asyncio.sleep(0.01)  # the work


async def main() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with Consumer(
        "jobs", "workers", handle, nsqd_tcp_addresses=[NSQD], max_in_flight=20
    ) as consumer:
        print("ready", flush=True)
        await stop.wait()
        await consumer.close()  # what leaving `async with` would do, made explicit
    print("stopped after", consumer.stats["finished"], "messages", flush=True)


asyncio.run(main())
