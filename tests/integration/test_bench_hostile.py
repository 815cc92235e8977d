"""`trionsq bench hostile` end to end on a small scale, against a trionsq nsqd process: both
phases run and report figures (which are not asserted: RSS on a shared machine is noise)."""

from __future__ import annotations

from trionsq.apps.bench import hostile, parse_args
from trionsq.testing import DaemonProcess, pythonpath_env


def test_hostile_flags() -> None:
    args = parse_args(["hostile", "--conns", "10", "--piece", "0", "--reset", "--settle", "1s"])
    assert (args.mode, args.conns, args.piece, args.reset, args.settle) == (
        "hostile",
        10,
        0,
        True,
        1.0,
    )
    defaults = parse_args(["hostile"])
    assert (defaults.conns, defaults.idle_conns, defaults.declared_size) == (300, 2000, 1 << 20)
    assert (defaults.partial, defaults.piece, defaults.reset) == (None, 65536, False)


def test_both_phases_run_against_nsqd() -> None:
    with DaemonProcess("nsqd", env=pythonpath_env()) as nsqd:
        results = hostile.run(
            nsqd.tcp_address,
            nsqd.proc.pid,
            "hostile_test",
            conns=5,
            declared=256 * 1024,
            piece=10_000,
            idle_conns=5,
            settle=0.0,
            reset=True,
        )
        assert nsqd.proc.poll() is None
    partial, idle = results
    assert not partial.idle and idle.idle
    assert partial.conns == 5 and partial.sent_per_conn > 128 * 1024
    for phase in results:
        assert phase.rss_baseline > 0 and phase.rss_peak > 0 and phase.rss_after > 0
        assert "after/baseline" in phase.line()
