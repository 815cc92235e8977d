"""`bench ceiling`: how fast the bench clients themselves can go, against a fake nsqd.

The fake server runs in its own process and does next to nothing per message: for the writer
it counts the bytes of the (fixed) MPUB command and answers OK for each; for the reader it
answers the SUB and then streams a pre-built block of message frames as fast as the socket
takes it (ignoring RDY), discarding the FINs. The rates measured are upper bounds on what the
clients can report against a real daemon on this machine.
"""

from __future__ import annotations

import queue
import socket
import threading
from typing import Any

from trionsq.protocol import MAGIC_V2, encode_message_frame, encode_response, mpub

from . import reader, writer
from .common import _CTX, BenchError, ThroughputResult

_OK = encode_response(b"OK")


def _serve(kind: str, cmd_len: int, size: int, port_out: Any, nconns: int) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port_out.put(listener.getsockname()[1])
    threads = []
    for _ in range(nconns):
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = _sink if kind == "writer" else _source
        t = threading.Thread(target=target, args=(conn, cmd_len, size), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError
        data += chunk
    return data


def _sink(conn: socket.socket, cmd_len: int, size: int) -> None:
    try:
        assert _recv_exact(conn, 4) == MAGIC_V2
        have = 0
        while True:
            data = conn.recv(262144)
            if not data:
                return
            have += len(data)
            n, have = divmod(have, cmd_len)
            if n:
                conn.sendall(_OK * n)
    except OSError:
        return
    finally:
        conn.close()


def _source(conn: socket.socket, cmd_len: int, size: int) -> None:
    try:
        assert _recv_exact(conn, 4) == MAGIC_V2
        line = b""
        while not line.endswith(b"\n"):
            line += _recv_exact(conn, 1)
        conn.sendall(_OK)
        frames = []
        for i in range(480):
            mid = b"%016x" % i
            frames.append(encode_message_frame(mid, 1, 1, b"\0" * size))
        block = b"".join(frames)

        def drain() -> None:
            try:
                while conn.recv(262144):
                    pass
            except OSError:
                pass

        threading.Thread(target=drain, daemon=True).start()
        while True:
            conn.sendall(block)
    except OSError:
        return
    finally:
        conn.close()


def run(
    kind: str,
    *,
    size: int = 100,
    batch_size: int = 200,
    runfor: float = 5.0,
    procs: int = 1,
    inflight: int = 1,
    rdy: int = 2500,
) -> ThroughputResult:
    """Run the `kind` ("writer" or "reader") client against the fake server."""
    cmd_len = len(mpub("ceiling", [b"\0" * size] * batch_size))
    port_out = _CTX.Queue()
    server = _CTX.Process(target=_serve, args=(kind, cmd_len, size, port_out, procs), daemon=True)
    server.start()
    try:
        try:
            port = port_out.get(timeout=30)
        except queue.Empty:
            raise BenchError("the fake server did not start") from None
        address = ("127.0.0.1", port)
        if kind == "writer":
            return writer.run(
                address,
                "ceiling",
                size=size,
                batch_size=batch_size,
                runfor=runfor,
                procs=procs,
                inflight=inflight,
            )
        return reader.run(address, "ceiling", "ch", size=size, rdy=rdy, runfor=runfor, procs=procs)
    finally:
        server.terminate()
        server.join(5)
