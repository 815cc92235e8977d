"""Consume with ``async for`` (no handler): each message is yours to answer, `finish` or
`requeue`. Runs under asyncio, or Trio with ``--trio``.
``NSQD_TCP_ADDRESS=127.0.0.1:4150 python iterate.py [--trio]``."""

import os
import sys

import anyio

from trionsq.client import Consumer, Producer

NSQD = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")


async def main() -> None:
    async with Producer(NSQD) as producer:
        await producer.mpub("events", [b"signup", b"login", b"logout"])

    seen = []
    async with Consumer("events", "audit", nsqd_tcp_addresses=[NSQD]) as consumer:
        async for message in consumer:
            if message.body == b"login" and message.attempts == 1:
                message.requeue(delay=0, backoff=False)  # try this one again, at once
                continue
            seen.append(message.body.decode())
            message.finish()
            if len(seen) == 3:
                break  # then `async with` closes the consumer
    print("seen:", ", ".join(sorted(seen)))


anyio.run(main, backend="trio" if "--trio" in sys.argv else "asyncio")
