"""pynsq's Writer and Reader with ``auth_secret`` against an nsqd that requires AUTH.

Usage: ``python pynsq_auth_client.py HOST:PORT TOPIC COUNT TIMEOUT SECRET``. Publishes COUNT
messages, consumes them on channel ``ch``, and prints one JSON line:
``{"ok": bool, "received": [...], "errors": [...]}``; errors include AUTH failures pynsq reports.
"""

from __future__ import annotations

import json
import logging
import sys

import nsq
import tornado.ioloop


def main() -> int:
    address, topic, count_s, timeout_s, secret = sys.argv[1:6]
    count, timeout = int(count_s), float(timeout_s)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    loop = tornado.ioloop.IOLoop.current()
    received: list[str] = []
    errors: list[str] = []
    bodies = [b"auth-%d" % i for i in range(count)]
    writer = nsq.Writer([address], auth_secret=secret)

    def handler(message: nsq.Message) -> bool:
        received.append(bytes(message.body).decode())
        if len(received) >= count:
            loop.call_later(0.3, loop.stop)
        return True

    def on_pub(conn: object, data: object) -> None:
        if isinstance(data, nsq.Error):
            errors.append(f"publish failed: {data}")
            loop.stop()

    def publish() -> None:
        if not any(c.connected() for c in writer.conns.values()):
            loop.call_later(0.05, publish)
            return
        writer.mpub(topic, bodies, on_pub)
        nsq.Reader(
            topic=topic,
            channel="ch",
            message_handler=handler,
            nsqd_tcp_addresses=[address],
            auth_secret=secret,
            max_in_flight=count,
        )

    def give_up() -> None:
        errors.append(f"timed out with {len(received)} of {count}")
        loop.stop()

    loop.call_later(0.1, publish)
    loop.call_later(timeout, give_up)
    loop.start()
    ok = not errors and sorted(received) == sorted(b.decode() for b in bodies)
    print(json.dumps({"ok": ok, "received": received, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
