"""Message IDs (docs/protocol.md §1.6): ((ts - 1288834974288) << 22) | (node_id << 12) | sequence,
ts = unix ns >> 20, as 16 lowercase hex ASCII bytes."""

from __future__ import annotations

import hashlib
import itertools
import re
import socket
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.protocol import GUIDFactory, default_node_id
from trionsq.protocol.guid import GUIDError, guid_to_hex

TWEPOCH = 1288834974288
NS = 1_700_000_000_000_000_000  # a fixed instant
TS = NS >> 20


def expected(ts: int, node: int, seq: int) -> int:
    return ((ts - TWEPOCH) << 22) | (node << 12) | seq


def test_bit_layout() -> None:
    f = GUIDFactory(node_id=517)
    assert f.new_guid(NS) == expected(TS, 517, 0)
    g = f.new_guid(NS)
    assert g == expected(TS, 517, 1)
    assert g & 0xFFF == 1
    assert (g >> 12) & 0x3FF == 517
    assert (g >> 22) + TWEPOCH == TS


def test_ts_is_ns_shifted_by_20() -> None:
    f = GUIDFactory(node_id=0)
    # Two instants in the same 1.048576 ms tick share ts; the next tick starts at sequence 0.
    base = TS << 20
    assert f.new_guid(base) == expected(TS, 0, 0)
    assert f.new_guid(base + (1 << 20) - 1) == expected(TS, 0, 1)
    assert f.new_guid(base + (1 << 20)) == expected(TS + 1, 0, 0)


def test_hex_form() -> None:
    assert guid_to_hex(0x0123456789ABCDEF) == b"0123456789abcdef"
    assert guid_to_hex(1) == b"0000000000000001"
    mid = GUIDFactory(node_id=1023).next_id()
    assert isinstance(mid, bytes)
    assert re.fullmatch(rb"[0-9a-f]{16}", mid)


def test_sequence_wraps_at_4096_with_an_error() -> None:
    f = GUIDFactory(node_id=3)
    ids = [f.new_guid(NS) for _ in range(4096)]
    assert [i & 0xFFF for i in ids] == list(range(4096))
    with pytest.raises(GUIDError):
        f.new_guid(NS)
    # Still the same tick: nothing can be made (the next one would not be greater).
    with pytest.raises(GUIDError):
        f.new_guid(NS)
    # Next tick: fine again, sequence 0.
    assert f.new_guid(NS + (1 << 20)) == expected(TS + 1, 3, 0)


def test_clock_going_backwards_raises() -> None:
    f = GUIDFactory(node_id=0)
    f.new_guid(NS)
    with pytest.raises(GUIDError):
        f.new_guid(NS - (1 << 20))
    # Once the clock is back where it was, IDs continue increasing.
    assert f.new_guid(NS) == expected(TS, 0, 1)


def test_strictly_increasing() -> None:
    f = GUIDFactory(node_id=9)
    ids = [f.next_id() for _ in range(5000)]
    assert ids == sorted(set(ids))
    assert all(len(i) == 16 for i in ids)


def test_next_ids_strictly_increasing_and_unique() -> None:
    f = GUIDFactory(node_id=42)
    ids = f.next_ids(10_000)  # more than one tick's worth of sequence numbers
    assert len(ids) == 10_000
    assert ids == sorted(set(ids))
    more = f.next_ids(5)
    assert more[0] > ids[-1]
    assert all(int(i, 16) >> 12 & 0x3FF == 42 for i in ids)


def test_default_node_id() -> None:
    for host in ("localhost", "nsqd-1.example.com", ""):
        want = zlib.crc32(hashlib.md5(host.encode()).digest()) % 1024
        assert default_node_id(host) == want
        assert 0 <= default_node_id(host) < 1024
    assert default_node_id() == default_node_id(socket.gethostname())


@pytest.mark.parametrize("node_id", [0, 1, 1023])
def test_node_id_range_ok(node_id: int) -> None:
    assert (GUIDFactory(node_id).new_guid(NS) >> 12) & 0x3FF == node_id


@pytest.mark.parametrize("node_id", [-1, 1024, 5000])
def test_node_id_out_of_range(node_id: int) -> None:
    with pytest.raises(ValueError):
        GUIDFactory(node_id)


def test_next_id_never_blocks_when_the_clock_goes_backwards(monkeypatch) -> None:

    from trionsq.protocol import guid as guid_module

    factory = guid_module.GUIDFactory(3)
    now = [1_795_000_000_000_000_000]
    monkeypatch.setattr(guid_module.time, "time_ns", lambda: now[0])
    monkeypatch.setattr(
        guid_module.time, "sleep", lambda s: (_ for _ in ()).throw(AssertionError("slept"))
    )
    first = factory.next_id()
    now[0] -= 5 * 10**9  # the clock steps back 5 s
    ids = [factory.next_id() for _ in range(10_000)]  # more than one tick's 4096
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[0] > first


def test_ids_made_faster_than_the_clock_ticks_stay_unique(monkeypatch) -> None:
    # 4,096 IDs a tick: beyond them, within one tick, the sequence runs on into the next
    # tick's; it must go on from the last ID made (a refused `new_guid` has already moved
    # the sequence on), or IDs repeat and FINs meet "ID not in flight".
    from trionsq.protocol import guid as guid_module

    monkeypatch.setattr(guid_module.time, "time_ns", lambda: 1_795_000_000_000_000_000)
    factory = guid_module.GUIDFactory(7)
    ids = [factory.next_id() for _ in range(10_000)]
    ids += [i for _ in range(100) for i in factory.next_ids(200)]
    assert ids == sorted(set(ids))
    assert {int(i, 16) >> 12 & 0x3FF for i in ids} == {7}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["next_id", "next_ids", "new_guid"]),
            st.integers(min_value=1, max_value=5000),
            st.sampled_from([0, 0, 0, 1 << 19, 1 << 20, 3 << 20, -(1 << 20), -(5 << 20)]),
        ),
        max_size=40,
    )
)
def test_ids_strictly_increase_whatever_the_clock_does(ops: list[tuple[str, int, int]]) -> None:
    """Property: however the clock moves (still, forward, back) and however many IDs are
    asked for at once, every ID made is greater than every ID made before it."""
    from trionsq.protocol import guid as guid_module

    now = [1_795_000_000_000_000_000]
    made: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(guid_module.time, "time_ns", lambda: now[0])
        factory = guid_module.GUIDFactory(5)
        for op, count, step in ops:
            now[0] += step
            if op == "next_id":
                made.append(int(factory.next_id(), 16))
            elif op == "next_ids":
                made += [int(i, 16) for i in factory.next_ids(count)]
            else:
                try:
                    made.append(factory.new_guid())
                except GUIDError:
                    pass  # refused: nothing made
    assert all(a < b for a, b in itertools.pairwise(made))
    assert all(i >> 12 & 0x3FF == 5 for i in made)
