"""Bounded queues' pieces without a daemon: the flags and their TOML keys, a topic's or
channel's own settings (`LimitOverride`), the limits in force, nsqd.dat's extra key, and the
disk queue's byte count (`DiskQueue.depth_bytes`) and head drop (`DiskQueue.drop`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trionsq.diskqueue import DiskQueue
from trionsq.nsqd import metadata
from trionsq.nsqd.bounds import BoundsError, LimitOverride, Limits, effective
from trionsq.nsqd.metadata import ChannelMetadata, TopicMetadata
from trionsq.nsqd.options import NSQDOptions, parse_nsqd_args
from trionsq.options import FlagError, HelpRequested, ValidationError
from trionsq.protocol.message import encode_message_frame, framed_id


def test_flags_and_config_keys(tmp_path: Path) -> None:
    opts = parse_nsqd_args(
        ["--max-queue-depth=100", "--max-queue-bytes=4096", "--queue-full-policy=drop-oldest"]
    )
    assert (opts.max_queue_depth, opts.max_queue_bytes, opts.queue_full_policy) == (
        100,
        4096,
        "drop-oldest",
    )
    config = tmp_path / "nsqd.toml"
    config.write_text('max_queue_depth = 7\nmax_queue_bytes = 9\nqueue_full_policy = "reject"\n')
    opts = parse_nsqd_args([f"--config={config}"])
    assert (opts.max_queue_depth, opts.max_queue_bytes, opts.queue_full_policy) == (7, 9, "reject")
    assert opts.get_option_by_cfg_key("queue_full_policy") == "reject"


def test_bad_policy_and_negative_limits_are_refused() -> None:
    with pytest.raises(FlagError) as info:
        parse_nsqd_args(["--queue-full-policy=drop-newest"])
    assert "drop-newest" in str(info.value)
    for field, message in (
        ("max_queue_depth", "--max-queue-depth must be >= 0"),
        ("max_queue_bytes", "--max-queue-bytes must be >= 0"),
    ):
        opts = NSQDOptions(**{field: -1})  # type: ignore[arg-type]
        with pytest.raises(ValidationError) as verr:
            opts.validate()
        assert str(verr.value) == message


def test_help_names_the_flags() -> None:
    with pytest.raises(HelpRequested) as info:
        parse_nsqd_args(["--help"])
    for flag in ("-max-queue-depth int", "-max-queue-bytes int", "-queue-full-policy value"):
        assert flag in info.value.usage


def test_limits_in_force_are_the_override_over_the_flags() -> None:
    off = NSQDOptions()
    assert effective(off, None) is None
    assert effective(off, LimitOverride(policy="drop-oldest")) is None
    assert effective(off, LimitOverride(max_depth=5)) == Limits(5, 0, False)
    flags = NSQDOptions(max_queue_depth=100, queue_full_policy="drop-oldest")
    assert effective(flags, None) == Limits(100, 0, True)
    assert effective(flags, LimitOverride(max_bytes=10, policy="reject")) == Limits(100, 10, False)
    # 0 in an override lifts the flag's limit for that queue
    assert effective(flags, LimitOverride(max_depth=0)) is None


def test_override_update_sets_clears_and_refuses_bad_values_whole() -> None:
    override = LimitOverride()
    override.update({"max_depth": "10", "policy": "drop-oldest"})
    assert override.to_json() == {"max_depth": 10, "policy": "drop-oldest"}
    override.update({"max_depth": "", "max_bytes": "0"})
    assert override.to_json() == {"max_bytes": 0, "policy": "drop-oldest"}
    for params, error in (
        ({"max_depth": "-1"}, "INVALID_MAX_DEPTH"),
        ({"max_depth": "1e3"}, "INVALID_MAX_DEPTH"),
        ({"max_bytes": "x"}, "INVALID_MAX_BYTES"),
        ({"max_bytes": str(1 << 63)}, "INVALID_MAX_BYTES"),
        ({"max_depth": "5", "policy": "newest"}, "INVALID_POLICY"),
    ):
        with pytest.raises(BoundsError) as info:
            override.update(params)
        assert str(info.value) == error
    assert override.to_json() == {"max_bytes": 0, "policy": "drop-oldest"}
    override.update({"max_bytes": "", "policy": ""})
    assert not override


def test_override_from_nsqd_dat_ignores_what_it_cannot_use() -> None:
    assert LimitOverride.from_json(None) is None
    assert LimitOverride.from_json([1]) is None
    assert LimitOverride.from_json({"max_depth": -3, "policy": "x"}) is None
    kept = LimitOverride.from_json({"max_depth": 3, "max_bytes": True, "policy": "reject"})
    assert kept == LimitOverride(max_depth=3, policy="reject")


def test_nsqd_dat_has_the_key_only_for_queues_with_settings() -> None:
    plain = [TopicMetadata("t", False, [ChannelMetadata("c")])]
    assert metadata.encode(plain) == (
        b'{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]}],'
        b'"version":"1.3.0"}'
    )
    limited = [
        TopicMetadata(
            "t",
            False,
            [ChannelMetadata("c", True, {"max_depth": 5})],
            {"policy": "drop-oldest"},
        )
    ]
    encoded = metadata.encode(limited)
    assert encoded == (
        b'{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":true,'
        b'"queue_limits":{"max_depth":5}}],"queue_limits":{"policy":"drop-oldest"}}],'
        b'"version":"1.3.0"}'
    )
    raw = json.loads(encoded)["topics"][0]
    topic = metadata._topic(raw)
    assert topic.limits == {"policy": "drop-oldest"}
    assert topic.channels[0].limits == {"max_depth": 5}


# -- the disk queue's bytes and head drop ---------------------------------------------------


def _frame(n: int, size: int) -> bytes:
    return encode_message_frame(b"%016x" % n, 1_700_000_000_000_000_000 + n, 1, b"x" * size)


def _queue(path: Path, **kwargs: object) -> DiskQueue:
    options: dict[str, object] = {
        "max_bytes_per_file": 200,
        "min_msg_size": 26,
        "max_msg_size": 26 + 1024,
        "sync_every": 1 << 30,
    }
    options.update(kwargs)
    return DiskQueue("t", str(path), **options)  # type: ignore[arg-type]


def test_depth_bytes_follows_writes_reads_and_segments(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    frames = [_frame(i, 10 + i) for i in range(12)]
    queue.put_many(frames[:5])
    queue.put_many(frames[5:])
    records = [len(f) - 4 for f in frames]  # 4-byte length + message
    assert queue.depth_bytes == sum(records)
    taken = queue.take(4)
    assert taken == frames[:4]
    assert queue.depth_bytes == sum(records[4:])
    assert len(list(tmp_path.glob("t.diskqueue.*.dat"))) > 1  # it crossed segments
    queue.take(7)
    assert queue.depth_bytes == records[11]
    queue.take(1)
    assert (queue.depth, queue.depth_bytes) == (0, 0)
    queue.put_many(frames[:2])
    queue.empty()
    assert (queue.depth, queue.depth_bytes) == (0, 0)


def test_depth_bytes_is_recovered_at_open(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    frames = [_frame(i, 30) for i in range(10)]
    queue.put_many(frames)
    queue.take(3)
    expected = queue.depth_bytes
    queue.close()
    again = _queue(tmp_path)
    assert (again.depth, again.depth_bytes) == (7, expected)
    assert again.take(7) == frames[3:]
    assert again.depth_bytes == 0


def test_drop_from_the_head_releases_a_tracking_queue(tmp_path: Path) -> None:
    queue = _queue(tmp_path, track_consumption=True)
    frames = [_frame(i, 20) for i in range(6)]
    queue.put_many(frames)
    assert queue.take(1) == frames[:1]  # in flight: owed
    assert queue.drop(3) == 3
    assert list(queue.owed) == [framed_id(frames[0])]  # the dropped ones are not owed
    assert queue.take(5) == frames[4:]
    assert queue.depth_bytes == 0
