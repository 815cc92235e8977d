"""The scripts of actions whose log lines are compared: one per daemon (nsqd, nsqlookupd,
nsqadmin). Each takes a `Run` (Go's build or trionsq's), starts its daemons, performs its steps
and stops the daemon it records with SIGTERM.

Steps whose lines Go prints in no fixed order are compared as multisets (``mode="multiset"``,
the reason beside each); the others by groups (see `compare.py`).
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable

from .driver import HTTP, Conn, Proc, Run, body_command, mpub_body

MAGIC_V2 = b"  V2"
MAGIC_V1 = b"  V1"
LOOKUPD_FLAGS = [
    "--tcp-address=127.0.0.1:0",
    "--http-address=127.0.0.1:0",
    "--broadcast-address=127.0.0.1",
]


def _ok(conn_frame: tuple[int, bytes]) -> None:
    assert conn_frame == (0, b"OK"), conn_frame


def nsqd_script(run: Run) -> None:
    """nsqd with an nsqlookupd: TCP clients (IDENTIFY, PUB, SUB/RDY/FIN, a body cut short),
    the HTTP API (including a 404, a 405 and a 400), then SIGTERM with messages in memory."""
    lookupd = run.start(
        "nsqlookupd",
        LOOKUPD_FLAGS,
    )
    lookupd_tcp = "{}:{}".format(*lookupd.address("TCP"))
    data = run.tmpdir("nsqd")
    run.masker.name_literal(data, "data")
    nsqd = run.start(
        "nsqd",
        [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={data}",
            f"--lookupd-tcp-address={lookupd_tcp}",
            "--broadcast-address=127.0.0.1",
            "--node-id=7",
        ],
        main=True,
    )

    with run.step("A connects"):
        a = run.connect(nsqd, "A")
        a.send(MAGIC_V2)
    with run.step("A identifies"):
        a.send(
            body_command(
                "IDENTIFY",
                json.dumps(
                    {
                        "client_id": "golog-client",
                        "hostname": "golog-host",
                        "user_agent": "golog/1.0",
                        "feature_negotiation": True,
                        "heartbeat_interval": 10000,
                        "output_buffer_size": 16384,
                        "output_buffer_timeout": 250,
                        "msg_timeout": 60000,
                    }
                ).encode(),
            )
        )
        frame_type, _ = a.frame()
        assert frame_type == 0
    with run.step("A publishes to a new topic"):
        a.send(body_command("PUB t1", b"hello"))
        _ok(a.frame())
    with run.step("B subscribes, takes the message and finishes it"):
        b = run.connect(nsqd, "B")
        b.send(MAGIC_V2)
        b.send(body_command("IDENTIFY", json.dumps({"client_id": "b"}).encode()))
        assert b.frame()[0] == 0
        b.send(b"SUB t1 c1\n")
        _ok(b.frame())
        b.send(b"RDY 1\n")
        frame_type, message = b.frame()
        assert frame_type == 2, (frame_type, message)
        b.send(b"FIN " + message[10:26] + b"\n")
    with run.step("C sends a PUB whose body is cut short"):
        c = run.connect(nsqd, "C")
        c.send(MAGIC_V2 + b"PUB t1\n" + struct.pack(">l", 100) + b"0123456789")
        c.close()
    with run.step("D sends a bad magic"):
        d = run.connect(nsqd, "D")
        d.send(b"  V9")
        d.close()
    with run.step("E sends an invalid command"):
        e = run.connect(nsqd, "E")
        e.send(MAGIC_V2 + b"BOGUS\n")
        assert e.frame()[0] == 1
    with run.step("A disconnects"):
        a.close()
    for name, feature in (("G", "deflate"), ("S", "snappy")):
        with run.step(f"{name} upgrades to {feature} and disconnects"):
            conn = run.connect(nsqd, name)
            conn.send(MAGIC_V2)
            conn.send(
                body_command(
                    "IDENTIFY", json.dumps({"feature_negotiation": True, feature: True}).encode()
                )
            )
            assert conn.frame()[0] == 0
            conn.recv_some()  # the OK over the compressed stream
            conn.close()

    h = run.http(nsqd)
    with run.step("GET /ping"):
        assert h.request("GET", "/ping")[0] == 200
    with run.step("POST /pub to a new topic"):
        assert h.request("POST", "/pub?topic=t2", b"m1")[0] == 200
    with run.step("POST /mpub"):
        assert h.request("POST", "/mpub?topic=t2", b"m2\nm3")[0] == 200
    with run.step("GET /stats"):
        assert h.request("GET", "/stats?format=json")[0] == 200
    with run.step("POST /topic/create"):
        assert h.request("POST", "/topic/create?topic=t3")[0] == 200
    with run.step("POST /channel/create"):
        assert h.request("POST", "/channel/create?topic=t3&channel=c3")[0] == 200
    with run.step("POST /channel/delete"):
        assert h.request("POST", "/channel/delete?topic=t3&channel=c3")[0] == 200
    with run.step("POST /topic/delete"):
        assert h.request("POST", "/topic/delete?topic=t3")[0] == 200
    with run.step("GET an unknown path (404)"):
        assert h.request("GET", "/no/such/path")[0] == 404
    with run.step("POST /ping (405)"):
        assert h.request("POST", "/ping")[0] == 405
    with run.step("POST /pub without a topic (400)"):
        assert h.request("POST", "/pub", b"m")[0] == 400
    with run.step("B and E disconnect"):
        b.close()
        e.close()
    with run.step("POST /pub with channel c1 idle"):
        assert h.request("POST", "/mpub?topic=t1&binary=true", mpub_body([b"y1", b"y2"]))[0] == 200
    with run.step("F subscribes to t2"):
        f = run.connect(nsqd, "F")
        f.send(MAGIC_V2 + b"SUB t2 c2\n")
        _ok(f.frame())
    h.close()
    # Go closes the topics in its map's random order: the lines of each topic keep their
    # order (its group), the topics' relative order is not compared.
    with run.step("SIGTERM"):
        assert run.stop(nsqd) == 0
    f.close()


#: Which topic a channel belongs to (groups of topic lines; see compare.py). Channel names
#: are unique across the scripts.
CHANNELS = {"c1": "t1", "c2": "t2", "c3": "t3", "c4": "t4", "c5": "t5"}


def nsqlookupd_script(run: Run) -> None:
    """nsqlookupd: a producer's V1 connection (IDENTIFY, REGISTER, UNREGISTER, PING, a bad
    command), the HTTP API, the producer going away, then SIGTERM."""
    lookupd = run.start(
        "nsqlookupd",
        LOOKUPD_FLAGS,
        main=True,
    )
    peer = {
        "broadcast_address": "127.0.0.1",
        "hostname": "golog-host",
        "tcp_port": 14150,
        "http_port": 14151,
        "version": "1.3.0",
    }

    def command(conn: Conn, line: bytes, body: bytes | None = None) -> bytes:
        conn.send(line + b"\n" + (b"" if body is None else struct.pack(">l", len(body)) + body))
        return conn.v1_response()

    with run.step("P connects"):
        p = run.connect(lookupd, "P")
        p.send(MAGIC_V1)
    with run.step("P identifies"):
        assert command(p, b"IDENTIFY", json.dumps(peer).encode()).startswith(b"{")
    with run.step("P registers a topic"):
        assert command(p, b"REGISTER t1") == b"OK"
    with run.step("P registers a channel"):
        assert command(p, b"REGISTER t1 c1") == b"OK"
    with run.step("P registers a second channel"):
        assert command(p, b"REGISTER t1 c9") == b"OK"
    with run.step("P unregisters a channel"):
        assert command(p, b"UNREGISTER t1 c1") == b"OK"
    with run.step("P pings"):
        assert command(p, b"PING") == b"OK"
    with run.step("P unregisters a topic with a channel left"):
        assert command(p, b"UNREGISTER t1") == b"OK"
    with run.step("P registers a topic and a channel again"):
        assert command(p, b"REGISTER t2 c2") == b"OK"

    h = run.http(lookupd)
    with run.step("GET /ping"):
        assert h.request("GET", "/ping")[0] == 200
    with run.step("GET /info"):
        assert h.request("GET", "/info")[0] == 200
    with run.step("GET /topics"):
        assert h.request("GET", "/topics")[0] == 200
    with run.step("GET /lookup"):
        assert h.request("GET", "/lookup?topic=t2")[0] == 200
    with run.step("GET /lookup of an unknown topic (404)"):
        assert h.request("GET", "/lookup?topic=nope")[0] == 404
    with run.step("GET /channels"):
        assert h.request("GET", "/channels?topic=t2")[0] == 200
    with run.step("GET /nodes"):
        assert h.request("GET", "/nodes")[0] == 200
    with run.step("POST /topic/create"):
        assert h.request("POST", "/topic/create?topic=t3")[0] == 200
    with run.step("POST /channel/create"):
        assert h.request("POST", "/channel/create?topic=t3&channel=c3")[0] == 200
    with run.step("POST /channel/delete"):
        assert h.request("POST", "/channel/delete?topic=t3&channel=c3")[0] == 200
    with run.step("POST /topic/tombstone"):
        assert h.request("POST", "/topic/tombstone?topic=t2&node=127.0.0.1:14151")[0] == 200
    with run.step("POST /topic/delete"):
        assert h.request("POST", "/topic/delete?topic=t3")[0] == 200
    with run.step("GET an unknown path (404)"):
        assert h.request("GET", "/no/such/path")[0] == 404
    with run.step("POST /ping (405)"):
        assert h.request("POST", "/ping")[0] == 405
    h.close()

    with run.step("Q sends an invalid command"):
        q = run.connect(lookupd, "Q")
        q.send(MAGIC_V1 + b"BOGUS\n")
        assert q.v1_response().startswith(b"E_INVALID")
        q.close()
    with run.step("R sends a bad magic"):
        r = run.connect(lookupd, "R")
        r.send(b"  V9")
        r.close()
    # Go removes a producer's registrations walking a map: in no fixed order.
    with run.step("P disconnects", mode="multiset"):
        p.close()
    with run.step("SIGTERM"):
        assert run.stop(lookupd) == 0


def nsqadmin_script(run: Run) -> None:
    """nsqadmin over an nsqlookupd and an nsqd: its pages and API (topics, nodes, a topic,
    creating and deleting a topic and a channel), a 404, then SIGTERM."""
    lookupd = run.start(
        "nsqlookupd",
        LOOKUPD_FLAGS,
    )
    nsqd = run.start(
        "nsqd",
        [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={run.tmpdir('nsqd')}",
            "--lookupd-tcp-address={}:{}".format(*lookupd.address("TCP")),
            "--broadcast-address=127.0.0.1",
        ],
    )
    n = run.http(nsqd, "setup")
    assert n.request("POST", "/topic/create?topic=t4")[0] == 200
    assert n.request("POST", "/channel/create?topic=t4&channel=c4")[0] == 200
    n.close()
    wait_registered(run, lookupd, "t4")
    admin = run.start(
        "nsqadmin",
        [
            "--http-address=127.0.0.1:0",
            "--lookupd-http-address={}:{}".format(*lookupd.address("HTTP")),
        ],
        main=True,
    )
    h = run.http(admin)
    with run.step("GET /ping"):
        assert h.request("GET", "/ping")[0] == 200
    with run.step("GET /"):
        assert h.request("GET", "/")[0] == 200
    with run.step("GET /api/topics"):
        assert h.request("GET", "/api/topics")[0] == 200
    with run.step("GET /api/topics/t4"):
        assert h.request("GET", "/api/topics/t4")[0] == 200
    with run.step("GET /api/topics/t4/c4"):
        assert h.request("GET", "/api/topics/t4/c4")[0] == 200
    with run.step("GET /api/nodes"):
        assert h.request("GET", "/api/nodes")[0] == 200
    with run.step("POST /api/topics (create)"):
        status, _ = h.request("POST", "/api/topics", json_body={"topic": "t5", "channel": "c5"})
        assert status == 200
    with run.step("DELETE /api/topics/t5/c5"):
        assert h.request("DELETE", "/api/topics/t5/c5")[0] == 200
    with run.step("GET an unknown path (404)"):
        assert h.request("GET", "/no/such/path")[0] == 404
    h.close()
    with run.step("SIGTERM"):
        assert run.stop(admin) == 0


def wait_registered(run: Run, lookupd: Proc, topic: str) -> None:
    """Until `lookupd` lists `topic`'s channel registrations (the nsqd registered them)."""
    h = HTTP(lookupd.address("HTTP"), lambda _: None)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, body = h.request("GET", f"/channels?topic={topic}")
            if status == 200 and json.loads(body).get("channels"):
                return
            time.sleep(0.05)
        raise AssertionError(f"{topic} never registered")
    finally:
        h.close()


SCRIPTS: dict[str, Callable[[Run], None]] = {
    "nsqd": nsqd_script,
    "nsqlookupd": nsqlookupd_script,
    "nsqadmin": nsqadmin_script,
}
