"""pynsq's Reader discovering nsqds through an nsqlookupd (``lookupd_http_addresses``).

Usage: ``python pynsq_lookupd_client.py LOOKUPD_HTTP TOPIC EXPECTED TIMEOUT``. Prints one JSON
line: ``{"ok": bool, "received": [body, ...], "error": str}`` once EXPECTED messages arrived.
"""

from __future__ import annotations

import json
import logging
import sys

import nsq
import tornado.ioloop


def main() -> int:
    lookupd, topic, expected_s, timeout_s = sys.argv[1:5]
    expected, timeout = int(expected_s), float(timeout_s)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    loop = tornado.ioloop.IOLoop.current()
    received: list[str] = []
    errors: list[str] = []

    def handler(message: nsq.Message) -> bool:
        received.append(bytes(message.body).decode())
        if len(received) >= expected:
            loop.call_later(0.3, loop.stop)
        return True

    def give_up() -> None:
        errors.append(f"timed out with {len(received)} of {expected} messages")
        loop.stop()

    nsq.Reader(
        topic=topic,
        channel="ch",
        message_handler=handler,
        lookupd_http_addresses=[f"http://{lookupd}"],
        lookupd_poll_interval=1,
        max_in_flight=100,
    )
    loop.call_later(timeout, give_up)
    loop.start()
    ok = not errors and len(received) >= expected
    print(json.dumps({"ok": ok, "received": received, "error": "; ".join(errors)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
