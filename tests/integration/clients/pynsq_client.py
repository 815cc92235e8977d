"""Drive pynsq (tornado) against an nsqd: publish with Writer.pub/.mpub, consume with Reader.

Usage: ``python pynsq_client.py pubsub|requeue HOST:PORT TOPIC COUNT TIMEOUT [CONN_OPTIONS]``.
Prints one JSON line: ``{"ok": bool, "published": [...], "received": [[body, attempts], ...],
"error": str, "features": {...}}``.

CONN_OPTIONS is a JSON object of pynsq connection options given to the Writer and the Reader
(``tls_v1``, ``tls_options``, ``snappy``, ``deflate``, ``deflate_level``); ``features`` reports
what nsqd granted in its IDENTIFY replies (the last reply seen for each key).

* ``pubsub``: COUNT messages with ``pub`` and COUNT in one ``mpub``, then a Reader receives
  and finishes them.
* ``requeue``: COUNT messages with ``mpub``; the handler returns False the first time it sees
  the body ``requeue-me`` (so pynsq sends REQ with delay 0), True otherwise.
"""

from __future__ import annotations

import json
import logging
import sys

import nsq
import tornado.ioloop

#: What nsqd granted, from the IDENTIFY replies the Writer's and Reader's connections saw.
FEATURES: dict = {}


def _record_features(data: object) -> None:
    if isinstance(data, dict):
        for key in ("tls_v1", "snappy", "deflate", "deflate_level"):
            FEATURES[key] = data.get(key)


class Writer(nsq.Writer):
    def _on_connection_identify_response(self, conn, data, **kwargs):  # type: ignore[no-untyped-def]
        _record_features(data)
        return super()._on_connection_identify_response(conn, data, **kwargs)


class Reader(nsq.Reader):
    def _on_connection_identify_response(self, conn, data, **kwargs):  # type: ignore[no-untyped-def]
        _record_features(data)
        return super()._on_connection_identify_response(conn, data, **kwargs)


def main() -> int:
    mode, address, topic, count_s, timeout_s = sys.argv[1:6]
    conn_options = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    count, timeout = int(count_s), float(timeout_s)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    loop = tornado.ioloop.IOLoop.current()
    state: dict = {"published": [], "received": [], "errors": [], "acks": 0}
    if mode == "pubsub":
        singles = [b"pub-%d" % i for i in range(count)]
        batch = [b"mpub-%d" % i for i in range(count)]
    elif mode == "requeue":
        singles = []
        batch = [b"msg-%d" % i for i in range(count - 1)] + [b"requeue-me"]
    else:
        raise SystemExit(f"unknown mode {mode}")
    expected = len(singles) + len(batch) + (1 if mode == "requeue" else 0)
    writer = Writer([address], **conn_options)

    def finish(stop_reason: str | None = None) -> None:
        if stop_reason:
            state["errors"].append(stop_reason)
        # Let the FINs/REQs go out before the loop stops.
        loop.call_later(0.3, loop.stop)

    def handler(message: nsq.Message) -> bool:
        body = bytes(message.body)
        state["received"].append([body.decode(), message.attempts])
        result = not (mode == "requeue" and body == b"requeue-me" and message.attempts == 1)
        if len(state["received"]) >= expected:
            finish()
        return result

    def on_pub(conn: object, data: object) -> None:
        if isinstance(data, nsq.Error):
            state["errors"].append(f"publish failed: {data}")
            finish()
            return
        state["acks"] += 1

    def start_reader() -> None:
        state["reader"] = Reader(
            topic=topic,
            channel="ch",
            message_handler=handler,
            nsqd_tcp_addresses=[address],
            max_in_flight=50,
            requeue_delay=0,
            msg_timeout=2,
            **conn_options,
        )

    def publish() -> None:
        if not any(c.connected() for c in writer.conns.values()):
            loop.call_later(0.05, publish)
            return
        for body in singles:
            writer.pub(topic, body, on_pub)
            state["published"].append(body.decode())
        writer.mpub(topic, batch, on_pub)
        state["published"].extend(b.decode() for b in batch)
        start_reader()

    loop.add_callback(publish)
    loop.call_later(timeout, finish, f"timed out after {timeout}s")
    loop.start()
    reader = state.pop("reader", None)
    if reader is not None:
        reader.close()
    acks_expected = len(singles) + 1
    if state["acks"] != acks_expected and not state["errors"]:
        state["errors"].append(f"{state['acks']} of {acks_expected} publishes acknowledged")
    out = {
        "ok": not state["errors"],
        "published": state["published"],
        "received": state["received"],
        "error": "; ".join(state["errors"]),
        "features": FEATURES,
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
