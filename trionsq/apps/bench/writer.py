"""`bench writer`: publish throughput, like NSQ's bench_writer.

Each process opens its own connection, pre-encodes one MPUB of `batch_size` messages of `size`
bytes and resends it until `runfor` has elapsed (or its share of `count` is sent). With
``--inflight 1`` it waits for each OK before the next MPUB, as Go's bench_writer does; a larger
value keeps that many MPUBs outstanding per connection (pipelining).
"""

from __future__ import annotations

import time
from typing import Any

from trionsq.protocol import FRAME_TYPE_RESPONSE, FrameDecoder, mpub

from .common import RECV_SIZE, BenchError, ThroughputResult, connect, run_workers


def _publish_worker(
    index: int, args: tuple[Any, ...], ready: Any, go: Any
) -> tuple[int, float, float]:
    address, topic, size, batch_size, runfor, batches, inflight = args
    cmd = mpub(topic, [b"\0" * size] * batch_size)
    sock = connect(address)
    decoder = FrameDecoder()
    ready.release()
    go.wait()
    sendall = sock.sendall
    recv = sock.recv
    start = time.perf_counter()
    cpu0 = time.process_time()
    deadline = start + runfor
    sent = acked = 0
    try:
        while sent < inflight and sent < batches:
            sendall(cmd)
            sent += 1
        while acked < sent:
            data = recv(RECV_SIZE)
            if not data:
                raise BenchError("nsqd closed the connection")
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                frame_type, body = frame
                if frame_type == FRAME_TYPE_RESPONSE:
                    if body == b"OK":
                        acked += 1
                    elif body == b"_heartbeat_":
                        sendall(b"NOP\n")
                    continue
                raise BenchError(f"MPUB: frame type {frame_type} {body[:200]!r}")
            if sent < batches and time.perf_counter() < deadline:
                while sent - acked < inflight and sent < batches:
                    sendall(cmd)
                    sent += 1
        end = time.perf_counter()
        cpu = time.process_time() - cpu0
    finally:
        sock.close()
    return acked * batch_size, end - start, cpu


def run(
    address: tuple[str, int],
    topic: str,
    *,
    size: int = 100,
    batch_size: int = 200,
    runfor: float = 10.0,
    procs: int = 2,
    count: int = 0,
    inflight: int = 1,
) -> ThroughputResult:
    """Publish for `runfor` seconds (or `count` messages in all, if > 0) from `procs`
    processes; the rate is the messages acknowledged over the longest worker's time."""
    if count > 0:
        total_batches = -(-count // batch_size)
        shares = [total_batches // procs + (i < total_batches % procs) for i in range(procs)]
        runfor = float("inf")
    else:
        shares = [1 << 62] * procs
    # Each worker takes its share by index; pass the list and let the index pick.
    results, _ = _run_with_shares(address, topic, size, batch_size, runfor, shares, inflight)
    msgs = sum(r[0] for r in results)
    elapsed = max(r[1] for r in results)
    return ThroughputResult("writer", msgs, elapsed, size, sum(r[2] for r in results))


def _share_worker(
    index: int, args: tuple[Any, ...], ready: Any, go: Any
) -> tuple[int, float, float]:
    address, topic, size, batch_size, runfor, shares, inflight = args
    return _publish_worker(
        index, (address, topic, size, batch_size, runfor, shares[index], inflight), ready, go
    )


def _run_with_shares(
    address: tuple[str, int],
    topic: str,
    size: int,
    batch_size: int,
    runfor: float,
    shares: list[int],
    inflight: int,
) -> tuple[list[tuple[int, float, float]], float]:
    timeout = (runfor if runfor != float("inf") else 600.0) + 60.0
    return run_workers(
        _share_worker,
        len(shares),
        (address, topic, size, batch_size, runfor, shares, inflight),
        timeout=timeout,
    )
