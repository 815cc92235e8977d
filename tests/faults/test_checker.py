"""The checker (checker.py) on made-up histories: each figure counts what it says."""

from __future__ import annotations

from .checker import check, summarise, trial_line
from .load import Delivery, FaultEvent, History, Sample, check_body, make_body

TAG = "t"


def _history() -> History:
    """Member 0 primary of epoch 1025 until 10 s, killed at 10 s; member 1 primary of 2050
    from 13 s; member 2 a replica throughout. Polls every 0.5 s."""
    h = History(tag=TAG, members=3)
    for i in range(60):
        t = i * 0.5
        if t < 10:
            h.samples[0].append(Sample(t, t + 0.01, "primary", 1025))
        h.samples[1].append(
            Sample(t, t + 0.01, "primary" if t >= 13 else "replica", 2050 if t >= 13 else 1025)
        )
        h.samples[2].append(Sample(t, t + 0.01, "replica", 2050 if t >= 13 else 1025))
    h.faults.append(FaultEvent(10.0, "kill-primary", [0], 0, 1025, failover=True, injected=10.01))
    return h


def _publish(h: History, seq: int, status: str, sent: float) -> bytes:
    h.status[seq] = status
    h.times[seq] = (sent, sent + 0.01 if status != "unknown" else None)
    return make_body(TAG, seq, 100)


def test_bodies_check_themselves() -> None:
    body = make_body(TAG, 42, 300)
    assert len(body) == 300
    assert check_body(body) == (TAG, 42)
    flipped = bytearray(body)
    flipped[20] ^= 4
    assert check_body(bytes(flipped)) is None
    assert check_body(body[:-1]) is None


def test_a_clean_failover() -> None:
    h = _history()
    for seq in range(10):
        body = _publish(h, seq, "ok", 1.0 + seq * 0.1)
        h.deliveries.append(Delivery(2.0 + seq * 0.1, 0, body, 1, 0.5))
    # Messages 8 and 9 were in flight at the old primary: the new one delivers them again.
    for seq in (8, 9):
        h.deliveries.append(Delivery(13.2, 1, make_body(TAG, seq, 100), 1, 0.5))
    body = _publish(h, 10, "ok", 12.0)
    h.deliveries.append(Delivery(13.3, 1, body, 1, 0.5))
    f = check(h, rdy=50)
    assert (f["lost"], f["corrupt"], f["never_published"]) == (0, 0, 0)
    assert f["duplicates"] == 2
    assert f["dup_per_failover"] == [2]
    assert f["epochs"] == [1025, 2050]
    assert f["failover_s"] == [3.2]
    assert f["publish_resumed_s"] == 2.0
    assert f["two_primaries"] == [] and f["non_primary_deliveries"] == 0
    assert f["converged"] is False  # member 0 never came back in this history
    assert trial_line("kill-primary", 1, f).startswith('FAULT-TRIAL {"fault": "kill-primary"')
    assert "| kill-primary | 1 |" in summarise([{"fault": "kill-primary", **f}])


def test_lost_corrupt_unacknowledged_and_foreign_bodies() -> None:
    h = _history()
    _publish(h, 0, "ok", 1.0)  # never delivered: lost
    body = _publish(h, 1, "unknown", 1.0)
    h.deliveries.append(Delivery(2.0, 0, body, 1, 0.5))  # delivered without an OK: fine
    bad = bytearray(_publish(h, 2, "ok", 1.0))
    bad[5] ^= 1
    h.deliveries.append(Delivery(2.1, 0, bytes(bad), 1, 0.5))  # corrupt (and 2 is lost)
    h.deliveries.append(Delivery(2.2, 0, make_body(TAG, 99, 100), 1, 0.5))  # never published
    f = check(h)
    assert f["lost"] == 2 and f["lost_examples"] == [0, 2]
    assert f["corrupt"] == 1
    assert f["never_published"] == 1
    assert f["unacked_delivered"] == 1


def test_deliveries_by_a_member_that_is_not_primary() -> None:
    h = _history()
    body = _publish(h, 0, "ok", 1.0)
    # Member 2 was a replica in the polls before and after.
    h.deliveries.append(Delivery(5.2, 2, body, 1, 0.5))
    # Member 0 delivering after member 1 was seen primary of a newer epoch, and not primary
    # after: a deposed primary.
    h.samples[0].append(Sample(15.0, 15.01, "replica", 2050))
    h.deliveries.append(Delivery(14.0, 0, body, 2, 0.5))
    f = check(h)
    assert f["non_primary_deliveries"] == 2
    # A delivery read on a connection that was open across a cut of the member's client
    # link is not counted (it may have been sent before the cut).
    h.client_cuts.append((0, 10.5, 13.9))
    assert check(h)["non_primary_deliveries"] == 1


def test_two_primaries_in_one_epoch() -> None:
    h = _history()
    h.samples[2].append(Sample(20.0, 20.01, "primary", 2050))
    assert check(h)["two_primaries"] == [2050]
