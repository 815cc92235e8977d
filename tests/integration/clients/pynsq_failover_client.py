"""An unmodified pynsq Reader across a failover of a replicated topic: it finds the topic's
primary through nsqlookupd (polling every second) and keeps consuming when another member
takes over.

Usage: ``python pynsq_failover_client.py LOOKUPD_HTTP TOPIC CHANNEL DONE_FILE TIMEOUT``. Runs
until DONE_FILE exists and nothing has arrived for 3 s (or TIMEOUT), then prints one JSON line:
``{"received": [body, ...]}`` (every delivery, duplicates included).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import nsq
import tornado.ioloop


def main() -> int:
    lookupd, topic, channel, done_file, timeout_s = sys.argv[1:6]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    loop = tornado.ioloop.IOLoop.current()
    received: list[str] = []
    last = [time.monotonic()]
    started = time.monotonic()

    def handler(message: nsq.Message) -> bool:
        received.append(bytes(message.body).decode())
        last[0] = time.monotonic()
        return True

    def check() -> None:
        now = time.monotonic()
        if now - started > float(timeout_s) or (os.path.exists(done_file) and now - last[0] > 3.0):
            loop.stop()
        else:
            loop.call_later(0.2, check)

    nsq.Reader(
        topic=topic,
        channel=channel,
        message_handler=handler,
        lookupd_http_addresses=[f"http://{lookupd}"],
        lookupd_poll_interval=1,
        max_in_flight=100,
    )
    loop.call_later(0.2, check)
    loop.start()
    print(json.dumps({"received": received}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
