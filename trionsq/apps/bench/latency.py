"""`bench latency`: publish-to-delivery latency through nsqd.

A publisher process PUBs one message at a time at a fixed rate (5,000/s by default), each body
starting with `time.perf_counter_ns()` taken just before the send (CLOCK_MONOTONIC, shared by
every process on the machine). A consumer process, subscribed with RDY 2500, stamps each read
once it returns and records ``receive - send`` for every message in it. The first `warmup`
samples are dropped; the rest give p50/p90/p99/p99.9.
"""

from __future__ import annotations

import struct
import time
from array import array
from dataclasses import dataclass
from typing import Any

from trionsq.protocol import FRAME_TYPE_RESPONSE, FrameDecoder

from .common import RECV_SIZE, BenchError, connect, percentile, run_workers, subscribe

_HEADER = struct.Struct(">Ii")
_STAMP = struct.Struct(">q")


@dataclass
class LatencyResult:
    count: int
    sent: int
    rate: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float

    def line(self) -> str:
        return (
            f"latency: {self.count:,} msgs at {self.rate:,.0f}/s: p50 {self.p50:,.0f} µs, "
            f"p90 {self.p90:,.0f} µs, p99 {self.p99:,.0f} µs, p99.9 {self.p999:,.0f} µs, "
            f"max {self.max:,.0f} µs"
        )


def summarize(latencies_ns: list[int], sent: int, rate: float) -> LatencyResult:
    """Percentiles in µs of the latencies (ns)."""
    if not latencies_ns:
        raise BenchError("no latency samples")
    values = sorted(latencies_ns)
    us = [v / 1000.0 for v in values]
    return LatencyResult(
        count=len(us),
        sent=sent,
        rate=rate,
        p50=percentile(us, 50),
        p90=percentile(us, 90),
        p99=percentile(us, 99),
        p999=percentile(us, 99.9),
        max=us[-1],
    )


def _publisher(index: int, args: tuple[Any, ...], ready: Any, go: Any) -> tuple[int, float]:
    address, topic, size, rate, count = args
    sock = connect(address)
    line = b"PUB %s\n" % topic.encode()
    size = max(size, 8)
    prefix = line + struct.pack(">i", size)
    padding = b"\0" * (size - 8)
    decoder = FrameDecoder()
    pack = _STAMP.pack
    sendall = sock.sendall
    recv = sock.recv
    perf_ns = time.perf_counter_ns
    interval = 1.0 / rate if rate > 0 else 0.0
    ready.release()
    go.wait()
    # Give the consumer a moment to get its RDY in.
    time.sleep(0.2)
    start = time.perf_counter()
    try:
        for i in range(count):
            if interval:
                target = start + i * interval
                delay = target - time.perf_counter()
                # Sleep, never spin: on 2 cores a spinning publisher steals the daemon's CPU.
                # Targets are absolute, so sleep overshoot (~60 µs) does not drift the rate.
                if delay > 0:
                    time.sleep(delay)
            sendall(prefix + pack(perf_ns()) + padding)
            while True:
                frame = decoder.next_frame()
                if frame is None:
                    data = recv(RECV_SIZE)
                    if not data:
                        raise BenchError("nsqd closed the publisher's connection")
                    decoder.feed(data)
                    continue
                frame_type, body = frame
                if frame_type == FRAME_TYPE_RESPONSE and body == b"OK":
                    break
                if frame_type == FRAME_TYPE_RESPONSE and body == b"_heartbeat_":
                    sendall(b"NOP\n")
                    continue
                raise BenchError(f"PUB: frame type {frame_type} {body[:200]!r}")
        elapsed = time.perf_counter() - start
    finally:
        sock.close()
    return count, elapsed


def _consumer(index: int, args: tuple[Any, ...], ready: Any, go: Any) -> array[int]:
    address, topic, channel, rdy, count, timeout = args
    sock, buf = subscribe(address, topic, channel)
    sock.sendall(b"RDY %d\n" % rdy)
    sock.settimeout(0.1)
    out = array("q")
    append = out.append
    unpack_from = _HEADER.unpack_from
    stamp_from = _STAMP.unpack_from
    perf_ns = time.perf_counter_ns
    ready.release()
    go.wait()
    # Stamps from before this run (messages another run or a writer left on the topic) are
    # finished but not counted.
    run_start = perf_ns()
    deadline = time.perf_counter() + timeout
    try:
        while len(out) < count:
            try:
                data = sock.recv(RECV_SIZE)
            except TimeoutError:
                if time.perf_counter() > deadline:
                    break
                continue
            now = perf_ns()
            if not data:
                raise BenchError("nsqd closed the consumer's connection")
            buf = buf + data if buf else data
            pos, n = 0, len(buf)
            fins = []
            while n - pos >= 8:
                size, frame_type = unpack_from(buf, pos)
                end = pos + 4 + size
                if end > n:
                    break
                if frame_type == 2:
                    fins.append(buf[pos + 18 : pos + 34])
                    stamp = stamp_from(buf, pos + 34)[0]
                    if run_start <= stamp <= now:
                        append(now - stamp)
                elif frame_type == 0:
                    sock.sendall(b"NOP\n")
                else:
                    raise BenchError(f"error frame {buf[pos + 8 : end][:200]!r}")
                pos = end
            buf = buf[pos:]
            if fins:
                sock.sendall(b"FIN " + b"\nFIN ".join(fins) + b"\n")
    finally:
        sock.close()
    return out


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
) -> LatencyResult:
    """Publish `count` messages at `rate`/s and measure each one's latency."""
    timeout = (count / rate if rate > 0 else count * 0.001) + 30.0
    results, _ = run_workers(
        _consumer,
        1,
        (address, topic, channel, rdy, count, timeout),
        timeout=timeout + 30.0,
        extra=[(_publisher, (address, topic, size, rate, count))],
    )
    samples, (sent, elapsed) = results
    values = list(samples)
    if len(values) < count:
        raise BenchError(f"latency: only {len(values):,} of {count:,} messages came back")
    if len(values) > warmup * 2:
        values = values[warmup:]
    return summarize(values, sent, sent / elapsed if elapsed > 0 else 0.0)
