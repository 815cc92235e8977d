"""Publish from synchronous code (a script, a WSGI/Django view, a Spark task): each call blocks
until nsqd answers OK. ``NSQD_TCP_ADDRESS=127.0.0.1:4150 python sync_publish.py``."""

import os
from concurrent.futures import ThreadPoolExecutor

from trionsq.client import NSQError, SyncProducer

NSQD = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")

# Connects now (NotConnectedError if nsqd cannot be reached); closed at the end of the block.
with SyncProducer(NSQD) as producer:
    producer.publish("signups", b"alice")  # returns once nsqd has the message
    producer.mpublish("signups", [b"bob", b"carol"])  # one MPUB: all or none
    producer.dpublish("reminders", 60_000, b"alice")  # delivered a minute from now

    # Thread-safe: threads share the one connection, taking turns (one command at a time).
    with ThreadPoolExecutor(max_workers=4) as pool:
        names = [f"user {i}".encode() for i in range(8)]
        list(pool.map(lambda name: producer.publish("signups", name, timeout=10), names))

    try:
        producer.publish("no spaces allowed", b"x")
    except NSQError as error:
        print("refused:", error.code)

print("published 11 signups and 1 reminder")
