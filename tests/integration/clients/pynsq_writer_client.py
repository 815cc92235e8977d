"""An unmodified pynsq Writer publishing to one nsqd: COUNT messages with ``pub``, COUNT in one
``mpub`` and one with ``dpub`` (DEFER_MS), each callback recorded.

Usage: ``python pynsq_writer_client.py HOST:PORT TOPIC COUNT DEFER_MS TIMEOUT``. Prints one
JSON line: ``{"acknowledged": [body, ...], "errors": [str, ...]}`` once every callback came
(or TIMEOUT passed: then an error says so).
"""

from __future__ import annotations

import json
import logging
import sys

import nsq
import tornado.ioloop


def main() -> int:
    address, topic, count_s, defer_s, timeout_s = sys.argv[1:6]
    count, defer_ms, timeout = int(count_s), int(defer_s), float(timeout_s)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    loop = tornado.ioloop.IOLoop.current()
    acknowledged: list[str] = []
    errors: list[str] = []
    expected = count + 2  # the PUBs, the MPUB, the DPUB
    answers = [0]
    writer = nsq.Writer([address])

    def callback_for(bodies: list[bytes]) -> object:
        def on_answer(conn: object, data: object) -> None:
            answers[0] += 1
            if isinstance(data, nsq.Error):
                errors.append(f"publish failed: {data}")
            else:
                acknowledged.extend(b.decode() for b in bodies)
            if answers[0] >= expected:
                loop.stop()

        return on_answer

    def publish() -> None:
        if not any(c.connected() for c in writer.conns.values()):
            loop.call_later(0.05, publish)
            return
        for i in range(count):
            body = b"pynsq-pub-%d" % i
            writer.pub(topic, body, callback_for([body]))
        batch = [b"pynsq-mpub-%d" % i for i in range(count)]
        writer.mpub(topic, batch, callback_for(batch))
        writer.dpub(topic, defer_ms, b"pynsq-dpub", callback_for([b"pynsq-dpub"]))

    def give_up() -> None:
        errors.append(f"timed out after {timeout}s ({answers[0]} of {expected} callbacks)")
        loop.stop()

    loop.add_callback(publish)
    loop.call_later(timeout, give_up)
    loop.start()
    print(json.dumps({"acknowledged": acknowledged, "errors": errors}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
