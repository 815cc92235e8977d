"""Publish-to-delivery latency with a consumer that IDENTIFYs its output buffer settings.

The same measurement as `bench latency` (its publisher process, unchanged, PUBs single messages
at a fixed rate carrying `time.perf_counter_ns()`; a consumer process records receive - send),
except that the consumer sends IDENTIFY before SUB. `bench latency`'s consumer does not, so
Go nsqd buffers its deliveries for the default ``output_buffer_timeout`` (250 ms) and the
figure measures that timer, not the daemon. Here the consumer asks for a small timeout (or
for no output buffer at all, ``output_buffer_size=-1``), so that neither daemon holds
messages back and the figures compare like with like.
"""

from __future__ import annotations

import struct
import time
from array import array
from typing import Any

from trionsq.protocol import identify

from . import latency
from .common import RECV_SIZE, BenchError, connect, expect_ok, run_workers
from .latency import LatencyResult, summarize

_HEADER = struct.Struct(">Ii")
_STAMP = struct.Struct(">q")


def identify_body(output_buffer_timeout_ms: int, output_buffer_size: int) -> dict[str, Any]:
    """The consumer's IDENTIFY fields (0 leaves a setting at the daemon's default)."""
    body: dict[str, Any] = {"client_id": "e2e", "hostname": "e2e", "user_agent": "trionsq-bench"}
    if output_buffer_timeout_ms:
        body["output_buffer_timeout"] = output_buffer_timeout_ms
    if output_buffer_size:
        body["output_buffer_size"] = output_buffer_size
    return body


def _consumer(index: int, args: tuple[Any, ...], ready: Any, go: Any) -> array[int]:
    address, topic, channel, rdy, count, stall, ident = args
    sock = connect(address)
    pending = bytearray()
    sock.sendall(identify(ident))
    expect_ok(sock, "IDENTIFY", pending)
    sock.sendall(b"SUB %s %s\n" % (topic.encode(), channel.encode()))
    expect_ok(sock, "SUB", pending)
    buf = bytes(pending)
    sock.sendall(b"RDY %d\n" % rdy)
    sock.settimeout(0.1)
    out = array("q")
    ready.release()
    go.wait()
    # Stamps from before this run are finished but not counted.
    run_start = time.perf_counter_ns()
    # The publisher may fall behind its rate: wait as long as messages keep coming.
    deadline = time.perf_counter() + stall
    try:
        while len(out) < count:
            try:
                data = sock.recv(RECV_SIZE)
            except TimeoutError:
                if time.perf_counter() > deadline:
                    break
                continue
            now = time.perf_counter_ns()
            if not data:
                raise BenchError("nsqd closed the consumer's connection")
            deadline = time.perf_counter() + stall
            buf = buf + data if buf else data
            buf = _read_frames(sock, buf, now, run_start, out)
    finally:
        sock.close()
    return out


def _read_frames(sock: Any, buf: bytes, now: int, run_start: int, out: array[int]) -> bytes:
    """Record the latency of every whole message frame in `buf`, FIN them in one send, answer
    heartbeats; returns the incomplete rest."""
    pos, n = 0, len(buf)
    fins = []
    while n - pos >= 8:
        size, frame_type = _HEADER.unpack_from(buf, pos)
        end = pos + 4 + size
        if end > n:
            break
        if frame_type == 2:
            fins.append(buf[pos + 18 : pos + 34])
            stamp = _STAMP.unpack_from(buf, pos + 34)[0]
            if run_start <= stamp <= now:
                out.append(now - stamp)
        elif frame_type == 0:
            sock.sendall(b"NOP\n")
        else:
            raise BenchError(f"error frame {buf[pos + 8 : end][:200]!r}")
        pos = end
    if fins:
        sock.sendall(b"FIN " + b"\nFIN ".join(fins) + b"\n")
    return buf[pos:]


def run(
    address: tuple[str, int],
    topic: str,
    channel: str,
    *,
    size: int = 100,
    rate: float = 5000.0,
    count: int = 50_000,
    rdy: int = 2500,
    warmup: int = 1000,
    output_buffer_timeout_ms: int = 0,
    output_buffer_size: int = -1,
    stall: float = 15.0,
) -> LatencyResult:
    """Publish `count` messages at `rate`/s (or as fast as one connection awaiting each OK
    can, if slower) and measure each one's latency; the consumer IDENTIFYs with the given
    output buffer settings first (default: no output buffer) and gives up once nothing came
    for `stall` seconds."""
    ident = identify_body(output_buffer_timeout_ms, output_buffer_size)
    results, _ = run_workers(
        _consumer,
        1,
        (address, topic, channel, rdy, count, stall, ident),
        # At least 1,000 PUBs a second, however far behind `rate` the publisher falls.
        timeout=count / min(rate, 1000.0) + 60.0 if rate > 0 else count * 0.001 + 60.0,
        # The latency mode's publisher, unchanged: one PUB at a time, each OK awaited.
        extra=[(latency._publisher, (address, topic, size, rate, count))],
    )
    samples, (sent, elapsed) = results
    values = list(samples)
    if len(values) < count:
        raise BenchError(f"latency: only {len(values):,} of {count:,} messages came back")
    if len(values) > warmup * 2:
        values = values[warmup:]
    return summarize(values, sent, sent / elapsed if elapsed > 0 else 0.0)
