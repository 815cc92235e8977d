"""`trionsq spark archive`'s "batch N: M messages" lines: one per micro-batch that ran, in
order, however many ran between two polls of the query's progress."""

from __future__ import annotations

from typing import Any

from trionsq.spark.cli import batches_done_since

_RAN = {"addBatch": 5, "latestOffset": 1, "triggerExecution": 7, "walCommit": 1}
_IDLE = {"latestOffset": 1, "triggerExecution": 1}


def _progress(batch_id: int, rows: int, durations: dict[str, int] = _RAN) -> dict[str, Any]:
    return {"batchId": batch_id, "numInputRows": rows, "durationMs": dict(durations)}


def test_batches_that_ran_between_two_polls_are_each_reported() -> None:
    recent = [_progress(0, 100), _progress(1, 100), _progress(2, 100), _progress(3, 40)]
    # The poll before saw batch 0; batches 1..3 ran before the next (lastProgress: batch 3 only).
    assert batches_done_since(recent, 0) == [(1, 100), (2, 100), (3, 40)]
    assert batches_done_since(recent, 3) == []
    assert batches_done_since(recent, -1)[0] == (0, 100)


def test_idle_triggers_are_not_batches() -> None:
    # After batch 4, idle triggers report the id of the batch still to come (5) with no rows;
    # batch 5, when it runs, is reported then, with its rows.
    recent = [_progress(4, 10), _progress(5, 0, _IDLE), _progress(5, 0, _IDLE)]
    assert batches_done_since(recent, 3) == [(4, 10)]
    assert batches_done_since([*recent, _progress(5, 7)], 4) == [(5, 7)]


def test_an_empty_batch_that_ran_is_reported() -> None:
    assert batches_done_since([_progress(6, 0)], 5) == [(6, 0)]
