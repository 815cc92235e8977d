"""Drive gnsq (gevent) against an nsqd: publish with Producer.publish/.multipublish, consume
with Consumer.

Usage: ``python gnsq_client.py pubsub|requeue HOST:PORT TOPIC COUNT TIMEOUT``. Prints one JSON
line: ``{"ok": bool, "published": [...], "received": [[body, attempts], ...], "error": str}``.

* ``pubsub``: COUNT messages with ``publish`` and COUNT with one ``multipublish``; a Consumer
  receives them (gnsq finishes each after the handler returns).
* ``requeue``: COUNT messages with ``multipublish``; the handler raises NSQRequeueMessage the
  first time it sees ``requeue-me`` (gnsq sends REQ with delay 0).
"""

from __future__ import annotations

# gevent must patch before anything imports socket/threading.
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
import gnsq  # noqa: E402
from gevent.event import Event  # noqa: E402
from gnsq.errors import NSQRequeueMessage  # noqa: E402


def main() -> int:
    mode, address, topic, count_s, timeout_s = sys.argv[1:6]
    count, timeout = int(count_s), float(timeout_s)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if mode == "pubsub":
        singles = [b"pub-%d" % i for i in range(count)]
        batch = [b"mpub-%d" % i for i in range(count)]
    elif mode == "requeue":
        singles = []
        batch = [b"msg-%d" % i for i in range(count - 1)] + [b"requeue-me"]
    else:
        raise SystemExit(f"unknown mode {mode}")
    expected = len(singles) + len(batch) + (1 if mode == "requeue" else 0)
    published: list[str] = []
    received: list[list[object]] = []
    errors: list[str] = []
    done = Event()

    producer = gnsq.Producer([address])
    consumer = gnsq.Consumer(topic, "ch", nsqd_tcp_addresses=[address], max_in_flight=50)

    @consumer.on_message.connect
    def handler(consumer: gnsq.Consumer, message: gnsq.Message) -> None:
        body = bytes(message.body)
        received.append([body.decode(), message.attempts])
        if len(received) >= expected:
            done.set()
        if mode == "requeue" and body == b"requeue-me" and message.attempts == 1:
            raise NSQRequeueMessage("requeue once")

    @consumer.on_error.connect
    def on_error(consumer: gnsq.Consumer, error: Exception) -> None:
        errors.append(f"consumer error: {error!r}")

    try:
        with gevent.Timeout(timeout, TimeoutError(f"timed out after {timeout}s")):
            producer.start()
            for body in singles:
                producer.publish(topic, body, timeout=timeout)
                published.append(body.decode())
            producer.multipublish(topic, batch, timeout=timeout)
            published.extend(b.decode() for b in batch)
            consumer.start(block=False)
            done.wait()
            gevent.sleep(0.3)  # let the last FIN go out
    except BaseException as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        with gevent.Timeout(5, False):
            consumer.close()
            producer.close()
            consumer.join(2)
            producer.join(2)
    out = {
        "ok": not errors,
        "published": published,
        "received": received,
        "error": "; ".join(errors),
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
