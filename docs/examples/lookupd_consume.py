"""Discovery: the consumer asks nsqlookupd which nsqds have the topic, connects to each, and
polls lookupd for new ones. ``NSQD_TCP_ADDRESS=... NSQLOOKUPD_HTTP_ADDRESS=127.0.0.1:4161
python lookupd_consume.py``."""

import asyncio
import os

from trionsq.client import Consumer, Producer

NSQD = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")
LOOKUPD = os.environ.get("NSQLOOKUPD_HTTP_ADDRESS", "127.0.0.1:4161")


async def main() -> None:
    async with Producer(NSQD) as producer:
        await producer.pub("clicks", b"click")  # the topic now exists: nsqd tells lookupd

    async with Consumer(
        "clicks",
        "stats",
        lookupd_http_addresses=[LOOKUPD],
        lookupd_poll_interval=5,  # seconds between polls (go-nsq's default is 60)
    ) as consumer:
        async for message in consumer:
            message.finish()
            print("from", message.nsqd_address, "got", message.body.decode())
            break


asyncio.run(main())
