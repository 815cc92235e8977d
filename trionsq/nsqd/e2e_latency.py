"""End-to-end processing latency (docs/protocol.md §2.8): for each channel, how long finished
messages took from publish to FIN over the last ``--e2e-processing-latency-window-time``,
summarised as the ``--e2e-processing-latency-percentile`` quantiles in `/stats`, statsd and
Prometheus.

Like nsqd, an estimator keeps two half-window streams: samples go to the current one, and every
window/2 the older one is dropped and a fresh one becomes current, so a query covers between
half a window and a whole window of samples. Rotation is lazy (on record and on query, on
`trio.current_time()`), so an idle channel costs nothing.

Go feeds bmizerany/perks targeted quantile streams. Each half-window here is instead a sparse
log-bucketed histogram (as DDSketch): a latency ``x`` ns falls in bucket ``ceil(log_g(x))``,
``g = (1 + a) / (1 - a)``, with relative accuracy ``a`` = 1%. Hence:

- accuracy: ranks are exact (every sample is counted); a reported value is within 1% of the
  true sample at that rank, and the extreme quantiles are exact (the min and max are kept, so
  quantile 1.0 is the largest latency);
- memory: one dict entry per occupied bucket, ~116 buckets per decade of latency, so at most
  ~1,300 entries per half-window even for latencies spanning 1 µs to a day, typically a few
  hundred; independent of the message rate;
- cost: recording is a log, a dict increment and two comparisons (~0.25 µs); a query merges
  the two halves' buckets and sorts the occupied ones once for all percentiles (~15-35 µs for
  ~370 occupied buckets).

A topic's latency is the merge of all its channels' estimators (`merged_result`).
"""

from __future__ import annotations

import math
import struct
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import Any, Protocol

import trio

__all__ = [
    "RELATIVE_ACCURACY",
    "E2ELatency",
    "FinRecorder",
    "disabled_result",
    "for_options",
    "merged_result",
]

#: Relative error bound of a reported latency value.
RELATIVE_ACCURACY = 0.01
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_INV_LOG_GAMMA = 1 / math.log(_GAMMA)
#: The smallest half-window: nsqd loops forever with a zero window; we just rotate often.
_MIN_HALF_WINDOW = 0.001
#: The message timestamp (int64 ns since the epoch) in a framed message (trionsq.protocol.message).
_FRAMED_TIMESTAMP = struct.Struct(">q")
_FRAMED_TIMESTAMP_OFFSET = 8

#: A `/stats` e2e latency object: ``{"count": N, "percentiles": [{"quantile", "value"}] | None}``.
Result = dict[str, Any]


def disabled_result() -> Result:
    """What `/stats` shows for a channel or topic without an estimator (e2e disabled)."""
    return {"count": 0, "percentiles": None}


class _HalfWindow:
    """The samples of one half-window: bucket index -> count, plus exact count, min and max."""

    __slots__ = ("buckets", "count", "max", "min")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.min = math.inf
        self.max = -math.inf


def _bucket_index(latency_ns: int) -> int:
    # Latencies below 1 ns (clock steps) share bucket 0; min/max keep their exact values.
    return math.ceil(math.log(latency_ns) * _INV_LOG_GAMMA) if latency_ns > 1 else 0


def _bucket_value(index: int) -> float:
    """The value representing a bucket, within RELATIVE_ACCURACY of anything in it."""
    return 2 * _GAMMA**index / (_GAMMA + 1)


class FinRecorder(Protocol):
    """A channel's e2e slot, which the FIN paths report each finished message's frame to: an
    `E2ELatency`, or what a layer above puts there to observe FINs and pass them on
    (replication's `FinObserver`, seam.py)."""

    @property
    def percentiles(self) -> tuple[float, ...] | None: ...

    def record_frame(self, frame: bytes, now: float | None = None) -> None: ...

    def live_halves(self, now: float | None = None) -> Sequence[_HalfWindow]: ...

    def result(self, now: float | None = None) -> Result: ...


class E2ELatency:
    """One channel's e2e processing latency estimator."""

    __slots__ = ("_current", "_half", "_next_move", "_previous", "percentiles")

    def __init__(self, window: float, percentiles: Sequence[float], now: float | None = None):
        self.percentiles = tuple(percentiles)
        self._half = max(window / 2, _MIN_HALF_WINDOW)
        self._current = _HalfWindow()
        self._previous = _HalfWindow()
        start = trio.current_time() if now is None else now
        self._next_move = start + self._half

    def record_frame(self, frame: bytes, now: float | None = None) -> None:
        """Record a finished framed message: now minus its publish timestamp."""
        published_ns = _FRAMED_TIMESTAMP.unpack_from(frame, _FRAMED_TIMESTAMP_OFFSET)[0]
        self.record(time.time_ns() - published_ns, now)

    def record(self, latency_ns: int, now: float | None = None) -> None:
        if now is None:
            now = trio.current_time()
        if now > self._next_move:
            self._rotate(now)
        half = self._current
        index = _bucket_index(latency_ns)
        buckets = half.buckets
        buckets[index] = buckets.get(index, 0) + 1
        half.count += 1
        if latency_ns < half.min:
            half.min = latency_ns
        if latency_ns > half.max:
            half.max = latency_ns

    def live_halves(self, now: float | None = None) -> tuple[_HalfWindow, _HalfWindow]:
        """The two half-windows after dropping what the window no longer covers."""
        if now is None:
            now = trio.current_time()
        if now > self._next_move:
            self._rotate(now)
        return self._current, self._previous

    @property
    def count(self) -> int:
        """Samples held (without rotating: for tests and cheap checks)."""
        return self._current.count + self._previous.count

    def result(self, now: float | None = None) -> Result:
        return _result(self.live_halves(now), self.percentiles)

    def _rotate(self, now: float) -> None:
        # nsqd moves the window once per elapsed half-window: one move drops the older half,
        # two or more drop both.
        half = self._half
        moves = math.ceil((now - self._next_move) / half) or 1
        if moves >= 2:
            self._previous = _HalfWindow()
        else:
            self._previous = self._current
        self._current = _HalfWindow()
        self._next_move += moves * half


def for_options(options: Any, now: float | None = None) -> E2ELatency | None:
    """A channel's estimator, or None when ``--e2e-processing-latency-percentile`` is unset."""
    percentiles = options.e2e_processing_latency_percentiles
    if not percentiles:
        return None
    return E2ELatency(options.e2e_processing_latency_window_time, percentiles, now)


def merged_result(estimators: Iterable[FinRecorder | None], now: float | None = None) -> Result:
    """A topic's latency: every sample of its channels' estimators; disabled if none has one."""
    halves: list[_HalfWindow] = []
    percentiles: tuple[float, ...] | None = None
    for estimator in estimators:
        if estimator is None:
            continue
        percentiles = estimator.percentiles
        halves.extend(estimator.live_halves(now))
    if percentiles is None:
        return disabled_result()
    return _result(halves, percentiles)


def _result(halves: Iterable[_HalfWindow], percentiles: Sequence[float]) -> Result:
    filled = [half for half in halves if half.count]
    total = sum(half.count for half in filled)
    if not total:
        # perks answers 0 for a quantile of an empty stream.
        values = [0.0] * len(percentiles)
    else:
        low = min(half.min for half in filled)
        high = max(half.max for half in filled)
        values = _quantile_values(_merged_buckets(filled), total, percentiles, low, high)
    return {
        "count": total,
        "percentiles": [
            {"quantile": q, "value": value} for q, value in zip(percentiles, values, strict=True)
        ],
    }


def _merged_buckets(halves: list[_HalfWindow]) -> dict[int, int]:
    if len(halves) == 1:
        return halves[0].buckets
    counts = dict(halves[0].buckets)
    get = counts.get
    for half in halves[1:]:
        for index, count in half.buckets.items():
            counts[index] = get(index, 0) + count
    return counts


def _quantile_values(
    buckets: dict[int, int],
    total: int,
    percentiles: Sequence[float],
    low: float,
    high: float,
) -> list[float]:
    """The value at each quantile's rank: the ceil(q * total)-th smallest sample, the first and
    last ranks being the exact min and max."""
    indexes = sorted(buckets)
    cumulative = list(accumulate(map(buckets.__getitem__, indexes)))
    values = []
    for q in percentiles:
        rank = max(1, math.ceil(q * total - 1e-9))
        if rank >= total:
            value = high
        elif rank == 1:
            value = low
        else:
            value = _bucket_value(indexes[bisect_left(cumulative, rank)])
            value = min(max(value, low), high)
        values.append(float(value))
    return values
