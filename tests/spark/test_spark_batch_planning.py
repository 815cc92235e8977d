"""How the streaming source cuts micro-batches (`ReaderRuntime._plan`) and when an AvailableNow
run may end (`_every_nsqd_has_room`), on a runtime that is never started: fake connections,
no sockets, no Spark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trionsq.spark.options import SourceOptions
from trionsq.spark.runtime import ReaderRuntime


@dataclass(eq=False)
class FakeConn:
    address: str
    rdy: int
    in_flight: int = 0
    closed: bool = field(default=False)


def runtime(conns: list[FakeConn], arrivals: list[FakeConn]) -> ReaderRuntime:
    """A runtime whose buffer holds one message per entry of `arrivals` (from that conn)."""
    options = SourceOptions.parse({"topic": "t", "channel": "c", "nsqd": "127.0.0.1:4150"})
    rt = ReaderRuntime(options, "session")
    rt._live = set(conns)  # type: ignore[arg-type]
    rt._payloads = [b"m"] * len(arrivals)
    rt._conns = list(arrivals)  # type: ignore[arg-type]
    for conn in arrivals:
        conn.in_flight += 1
    return rt


def test_a_batch_takes_at_most_half_of_each_nsqds_window_not_of_each_connection() -> None:
    a1, a2 = FakeConn("a:4150", rdy=10), FakeConn("a:4150", rdy=10)
    # nsqd handed all 10 to one connection: with a per-connection rule the batch would stop at
    # 5; half of nsqd a's window (20) is 10.
    rt = runtime([a1, a2], [a1] * 10 + [a2] * 5)
    assert rt._plan(0, None) == 10
    assert rt._plan(10, None) == 15


def test_each_nsqd_is_limited_on_its_own() -> None:
    a, b = FakeConn("a:4150", rdy=4), FakeConn("b:4150", rdy=100)
    rt = runtime([a, b], [b, a, b, a, b, a, b])
    # The third message from a would pass half of a's window (2).
    assert rt._plan(0, None) == 5


def test_the_read_limit_still_caps_the_batch() -> None:
    a = FakeConn("a:4150", rdy=100)
    rt = runtime([a], [a] * 30)
    assert rt._plan(0, 7) == 7
    assert rt._plan(7, 100) == 30


def test_an_nsqd_with_one_full_connection_but_room_on_another_is_not_blocking() -> None:
    a1, a2 = FakeConn("a:4150", rdy=2), FakeConn("a:4150", rdy=2)
    rt = runtime([a1, a2], [a1, a1])  # a1 full (the uncommitted batch), a2 idle
    assert rt._every_nsqd_has_room()


def test_an_nsqd_whose_connections_are_all_full_is_not_known_to_be_drained() -> None:
    a1, a2, b = FakeConn("a:4150", rdy=1), FakeConn("a:4150", rdy=1), FakeConn("b:4150", rdy=5)
    rt: Any = runtime([a1, a2, b], [a1, a2])
    assert not rt._every_nsqd_has_room()
    rt._done.add(a1)  # a1 saw a message past the AvailableNow frontier
    assert rt._every_nsqd_has_room()


# -- the staged source's planner (trionsq.spark.planner.split_plan) ----------------------------


def test_staged_plan_follows_depth_and_the_row_limit() -> None:
    from trionsq.spark.planner import NsqdDepth, split_plan

    a, b, c = NsqdDepth("a:1", "a:2", 300), NsqdDepth("b:1", "b:2", 100), NsqdDepth("c:1", None, 0)
    # Everything waiting fits: each nsqd's depth, cut into up to 2 partitions; c has nothing.
    assert split_plan([a, b, c], 1000, 2) == [["a:1", 150], ["a:1", 150], ["b:1", 50], ["b:1", 50]]
    # Over the limit: shares in proportion to depth, summing to the limit exactly.
    plan = split_plan([a, b], 200, 1)
    assert plan == [["a:1", 150], ["b:1", 50]]
    assert sum(n for _, n in split_plan([a, b, NsqdDepth("d:1", "d:2", 7)], 101, 3)) == 101


def test_staged_plan_reads_an_nsqd_of_unknown_depth_and_skips_empty_ones() -> None:
    from trionsq.spark.planner import NsqdDepth, split_plan

    unknown = NsqdDepth("u:1", None, None)
    assert split_plan([unknown, NsqdDepth("e:1", "e:2", 0)], 500, 2) == [
        ["u:1", 250],
        ["u:1", 250],
    ]
    assert split_plan([NsqdDepth("e:1", "e:2", 0)], 500, 2) == []
    # Fewer messages than partitions: no empty partition.
    assert split_plan([NsqdDepth("s:1", "s:2", 1)], 500, 4) == [["s:1", 1]]
