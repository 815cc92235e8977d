"""`bench reader`: delivery throughput, like NSQ's bench_reader.

Each process subscribes to the topic/channel, sets RDY (2500 by default) and FINs every
message it receives: the FINs of one read are joined and sent with one `sendall`. The frames
are parsed in place on the received `bytes` (no object per message but the 16-byte ID slice).
Workers stop when `runfor` has elapsed or, with `count`, when all processes together have
consumed that many messages. With a transport other than plain, each connection negotiates
TLS, snappy or deflate in IDENTIFY first (`transports`).
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

from .common import (
    _CTX,
    RECV_SIZE,
    BenchError,
    ThroughputResult,
    run_workers,
)
from .transports import TransportSpec, subscribe_with

_HEADER = struct.Struct(">Ii")
_HEARTBEAT_FRAME = _HEADER.pack(15, 0) + b"_heartbeat_"


def parse_batch(buf: bytes, pos: int, ids: list[bytes]) -> tuple[int, int]:
    """Scan whole frames of `buf` from `pos`: append each message's ID to `ids`. Returns the
    position of the first incomplete frame and the number of heartbeats seen; raises
    `BenchError` on an error frame."""
    unpack_from = _HEADER.unpack_from
    append = ids.append
    n = len(buf)
    heartbeats = 0
    while n - pos >= 8:
        size, frame_type = unpack_from(buf, pos)
        end = pos + 4 + size
        if end > n:
            break
        if frame_type == 2:
            append(buf[pos + 18 : pos + 34])
        elif frame_type == 0:
            heartbeats += 1  # _heartbeat_ (the only response expected after SUB)
        else:
            raise BenchError(f"error frame {buf[pos + 8 : end][:200]!r}")
        pos = end
    return pos, heartbeats


def _consume_worker(
    index: int, args: tuple[Any, ...], ready: Any, go: Any
) -> tuple[int, float, float, float]:
    address, topic, channel, rdy, runfor, counters, stop, spec = args
    sock, buf = subscribe_with(address, topic, channel, spec)
    # The timeout lets an idle worker see the deadline or the stop flag.
    sock.settimeout(0.1)
    ready.release()
    go.wait()
    start = last = time.perf_counter()
    cpu0 = time.process_time()
    deadline = start + runfor
    sendall = sock.sendall
    recv = sock.recv
    count = 0
    sendall(b"RDY %d\n" % rdy)
    try:
        while True:
            try:
                data = recv(RECV_SIZE)
            except TimeoutError:
                data = None
            now = time.perf_counter()
            if data is not None:
                if not data:
                    raise BenchError("nsqd closed the connection")
                buf = buf + data if buf else data
                ids: list[bytes] = []
                pos, heartbeats = parse_batch(buf, 0, ids)
                buf = buf[pos:]
                if ids:
                    sendall(b"FIN " + b"\nFIN ".join(ids) + b"\n")
                    count += len(ids)
                    counters[index] = count
                    last = now
                if heartbeats:
                    sendall(b"NOP\n")
            if now >= deadline or stop.value:
                break
        cpu = time.process_time() - cpu0
    finally:
        sock.close()
    return count, start, last, cpu


def run(
    address: tuple[str, int],
    topic: str,
    channel: str,
    *,
    size: int = 100,
    rdy: int = 2500,
    runfor: float = 10.0,
    procs: int = 2,
    count: int = 0,
    transport: TransportSpec | None = None,
) -> ThroughputResult:
    """Consume for `runfor` seconds or until `count` (> 0) messages are consumed in all. The
    rate is the messages over the time from go to the last message received."""
    counters = _CTX.RawArray("q", procs)
    stop = _CTX.RawValue("b", 0)
    spec = transport or TransportSpec()
    args = (address, topic, channel, rdy, runfor, counters, stop, spec)
    if count > 0:

        def _watch() -> None:
            # Polls the shared counters and tells the workers to stop once all is consumed.
            while not stop.value:
                if sum(counters) >= count:
                    stop.value = 1
                    return
                time.sleep(0.002)

        watcher = threading.Thread(target=_watch, daemon=True)
        watcher.start()
    try:
        results, _ = run_workers(_consume_worker, procs, args, timeout=runfor + 60.0)
    finally:
        stop.value = 1
    msgs = sum(r[0] for r in results)
    start = min(r[1] for r in results)
    last = max(r[2] for r in results)
    cpu = sum(r[3] for r in results)
    label = "reader" if spec.name == "plain" else f"reader ({spec.name})"
    return ThroughputResult(label, msgs, max(last - start, 1e-9), size, cpu)
