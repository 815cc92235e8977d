"""Dead-lettering and message TTL without a daemon: the --dead-letter-topic pattern, the
screening of frames, the flags and their TOML keys, nsqd.dat's settings, and the Prometheus
families that appear only with the feature."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.stats_samples import channel_stats, topic_stats
from trionsq.diskqueue.fs import LOCAL
from trionsq.nsqd import metadata
from trionsq.nsqd.dead_letter import Limits, Screen, limits_from_json
from trionsq.nsqd.dead_letter_names import DeadLetterNames, pattern_problem
from trionsq.nsqd.metadata import ChannelMetadata, TopicMetadata
from trionsq.nsqd.options import NSQDOptions, parse_nsqd_args
from trionsq.nsqd.prometheus import ProcessMetrics, render_prometheus
from trionsq.options import ValidationError
from trionsq.protocol.message import encode_message_frame

# -- the pattern ------------------------------------------------------------------------------


def test_the_default_pattern_names_topic_dot_dead_and_keeps_ephemerality() -> None:
    names = DeadLetterNames("{topic}.dead")
    assert names.topic_for("orders", "billing") == "orders.dead"
    assert names.topic_for("orders", "tail#ephemeral") == "orders.dead"
    assert names.topic_for("e#ephemeral", "c") == "e.dead#ephemeral"
    assert names.topic_for("x" * 59, "c") == "x" * 59 + ".dead"  # 64 characters
    assert names.topic_for("x" * 60, "c") is None  # 65: not a valid NSQ name


def test_dead_letter_topics_are_the_names_the_pattern_can_make() -> None:
    names = DeadLetterNames("{topic}.dead")
    assert names.is_dead_letter_topic("orders.dead")
    assert names.is_dead_letter_topic("e.dead#ephemeral")
    assert not names.is_dead_letter_topic("orders")
    assert not names.is_dead_letter_topic(".dead")
    assert not names.is_dead_letter_topic("orders.dead.letters")
    per_channel = DeadLetterNames("dlq-{topic}-{channel}")
    assert per_channel.topic_for("t", "c") == "dlq-t-c"
    assert per_channel.is_dead_letter_topic("dlq-t-c")
    assert not per_channel.is_dead_letter_topic("t")
    fixed = DeadLetterNames("graveyard")
    assert fixed.topic_for("t", "c") == "graveyard"
    assert fixed.is_dead_letter_topic("graveyard") and not fixed.is_dead_letter_topic("t")


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("", "must not be empty"),
        ("{topic}", "must have text besides {topic} and {channel}"),
        ("{topic}{channel}", "must have text besides {topic} and {channel}"),
        ("{topic}.{name}", "may use only the placeholders {topic} and {channel}"),
        ("{topic}#dead", "must be made of the characters [.a-zA-Z0-9_-] besides"),
        ("{topic} dead", "must be made of the characters [.a-zA-Z0-9_-] besides"),
        ("{topic}." + "d" * 63, "makes names longer than 64 characters"),
    ],
)
def test_bad_patterns(pattern: str, problem: str) -> None:
    found = pattern_problem(pattern)
    assert found is not None and found.startswith(problem)


@pytest.mark.parametrize(
    "pattern", ["{topic}.dead", "dead_{channel}", "x-{topic}-{channel}", "dlq"]
)
def test_good_patterns(pattern: str) -> None:
    assert pattern_problem(pattern) is None


# -- screening --------------------------------------------------------------------------------


def frame(attempts: int, age_s: float = 0.0, body: bytes = b"b") -> bytes:
    published = time.time_ns() - int(age_s * 1e9)
    return encode_message_frame(b"0123456789abcdef", published, attempts, body)


def test_split_by_attempts_and_age() -> None:
    young, tried, old = frame(2), frame(3), frame(0, age_s=120)
    kept, dead, expired = Screen(3, 60 * 10**9, "t.dead").split([young, tried, old])
    assert (kept, dead, expired) == ([young], [tried], [old])
    # Without a TTL, age does not matter; without max attempts, attempts do not.
    assert Screen(3, 0, "t.dead").split([young, tried, old]) == ([young, old], [tried], [])
    assert Screen(0, 60 * 10**9, None).split([young, tried, old]) == ([young, tried], [], [old])


# -- options ----------------------------------------------------------------------------------


def test_flags_and_config_keys(tmp_path: Path) -> None:
    opts = parse_nsqd_args(
        ["--max-attempts=5", "--dead-letter-topic=dlq.{topic}", "--message-ttl=90s"]
    )
    assert (opts.max_attempts, opts.dead_letter_topic, opts.message_ttl) == (5, "dlq.{topic}", 90)
    config = tmp_path / "nsqd.toml"
    config.write_text('max_attempts = 7\ndead_letter_topic = "{topic}.dlq"\nmessage_ttl = "1h"\n')
    opts = parse_nsqd_args([f"--config={config}"])
    assert (opts.max_attempts, opts.dead_letter_topic, opts.message_ttl) == (7, "{topic}.dlq", 3600)
    opts.validate()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_attempts": -1}, "--max-attempts must be [0,65535]"),
        ({"max_attempts": 65536}, "--max-attempts must be [0,65535]"),
        ({"message_ttl": -1.0}, "--message-ttl must be >= 0"),
        (
            {"dead_letter_topic": "{topic}"},
            "--dead-letter-topic must have text besides {topic} and {channel}",
        ),
    ],
)
def test_validation(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        NSQDOptions(**changes).validate()
    assert str(info.value) == message


def test_help_marks_the_flags_as_trionsqs() -> None:
    from trionsq.nsqd.options import nsqd_flagset

    flags = nsqd_flagset().flags
    for name in ("max-attempts", "dead-letter-topic", "message-ttl"):
        assert flags[name].help.startswith("[trionsq]")


# -- nsqd.dat ---------------------------------------------------------------------------------


def test_nsqd_dat_has_settings_only_where_set() -> None:
    topics = [
        TopicMetadata(
            "t",
            False,
            [
                ChannelMetadata("c", False, delivery_limits=Limits(max_attempts=3)),
                ChannelMetadata("d"),
            ],
            delivery_limits=Limits(message_ttl=60 * 10**9),
        ),
        TopicMetadata("u", True, []),
    ]
    encoded = metadata.encode(topics)
    assert json.loads(encoded)["topics"] == [
        {
            "name": "t",
            "paused": False,
            "message_ttl": 60 * 10**9,
            "channels": [
                {"name": "c", "paused": False, "max_attempts": 3},
                {"name": "d", "paused": False},
            ],
        },
        {"name": "u", "paused": True, "channels": None},
    ]
    plain = [TopicMetadata("u", True, [ChannelMetadata("c")])]
    assert metadata.encode(plain) == (
        b'{"topics":[{"name":"u","paused":true,"channels":[{"name":"c","paused":false}]}],'
        b'"version":"1.3.0"}'
    )


def test_nsqd_dat_settings_load_back_and_bad_ones_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "nsqd.dat"
    path.write_text(
        json.dumps(
            {
                "topics": [
                    {
                        "name": "t",
                        "paused": False,
                        "max_attempts": 4,
                        "channels": [
                            {"name": "c", "paused": False, "message_ttl": 5},
                            {"name": "d", "paused": False, "max_attempts": "many"},
                            {"name": "e", "paused": False, "max_attempts": 70000},
                        ],
                    }
                ],
                "version": "1.3.0",
            }
        )
    )
    (topic,) = metadata.load(LOCAL, str(path))
    assert topic.delivery_limits == Limits(max_attempts=4)
    assert [c.delivery_limits for c in topic.channels] == [Limits(message_ttl=5), None, None]


def test_limits_from_json() -> None:
    assert limits_from_json({"name": "t"}) is None
    assert limits_from_json({"max_attempts": 0}) == Limits(max_attempts=0)
    assert limits_from_json({"max_attempts": None, "message_ttl": None}) is None
    with pytest.raises(ValueError):
        limits_from_json({"message_ttl": True})


# -- Prometheus -------------------------------------------------------------------------------

PROCESS = ProcessMetrics(cpu_seconds=1.0)


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_families_appear_only_for_channels_with_the_keys() -> None:
    plain = channel_stats("plain")
    counted = {**channel_stats("counted"), "dead_letter_count": 3, "expired_count": 2}
    snapshot = {"version": "1.3.0", "topics": [topic_stats("t", plain, counted)]}
    families = _families(render_prometheus(snapshot, PROCESS))
    (dead,) = families["nsq_channel_dead_lettered"].samples
    assert (dead.labels, dead.value) == ({"topic": "t", "channel": "counted"}, 3)
    (expired,) = families["nsq_channel_expired"].samples
    assert expired.value == 2
    without = {"version": "1.3.0", "topics": [topic_stats("t", plain)]}
    text = render_prometheus(without, PROCESS)
    assert "dead_lettered" not in text and "expired" not in text


# -- nsqadmin ---------------------------------------------------------------------------------


def test_nsqadmin_passes_and_sums_the_counts_only_from_nsqds_that_report_them() -> None:
    from trionsq.nsqadmin import aggregate

    producer = {"hostname": "h"}
    counted = {
        **channel_stats("c"),
        "dead_letter_count": 3,
        "expired_count": 1,
        "dead_letter_topic": "t.dead",
    }
    one = aggregate.channel_stats(counted, "t", "n1:4151", producer, 0.0)
    other = aggregate.channel_stats(
        {**counted, "dead_letter_count": 2}, "t", "n2:4151", producer, 0.0
    )
    plain = aggregate.channel_stats(channel_stats("c"), "t", "n3:4151", producer, 0.0)
    assert (one["dead_letter_count"], one["dead_letter_topic"]) == (3, "t.dead")
    assert "dead_letter_count" not in plain
    total = aggregate.aggregate_channel("t", "c", [one, other, plain])
    assert (total["dead_letter_count"], total["expired_count"]) == (5, 2)
    assert total["dead_letter_topic"] == "t.dead"
    assert "dead_letter_count" not in aggregate.aggregate_channel("t", "c", [plain])
