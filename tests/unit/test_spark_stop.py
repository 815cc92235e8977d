"""`trionsq.spark.pipeline.stop_between_batches`: the archive query is stopped once the batch
being written is written (not in the middle of it), within its time limit, or at once when
hurried."""

from __future__ import annotations

import threading

from trionsq.spark.pipeline import stop_between_batches


class _Query:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def stop(self) -> None:
        self.events.append("stopped")


def test_the_stop_waits_for_the_batch_being_written() -> None:
    events: list[str] = []
    writing = threading.Event()
    writing.set()

    def finish_the_batch() -> None:
        events.append("written")
        writing.clear()

    timer = threading.Timer(0.2, finish_the_batch)
    timer.start()
    try:
        stop_between_batches(_Query(events), writing, timeout=60)
    finally:
        timer.cancel()
    assert events == ["written", "stopped"]


def test_no_batch_being_written_stops_at_once() -> None:
    events: list[str] = []
    stop_between_batches(_Query(events), threading.Event(), timeout=60)
    assert events == ["stopped"]


def test_a_batch_that_does_not_end_in_time_is_stopped_anyway() -> None:
    events: list[str] = []
    writing = threading.Event()
    writing.set()
    stop_between_batches(_Query(events), writing, timeout=0.05)
    assert events == ["stopped"] and writing.is_set()


def test_hurried_it_stops_without_waiting() -> None:
    events: list[str] = []
    writing = threading.Event()
    writing.set()
    stop_between_batches(_Query(events), writing, timeout=60, hurry=lambda: True)
    assert events == ["stopped"] and writing.is_set()
