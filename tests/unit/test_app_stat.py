"""`trionsq stat` (nsq_stat) without daemons: Go's flag checks and the table it prints from
polled totals."""

from __future__ import annotations

import io

import pytest

from trionsq.apps.stat import HEADER, ChannelTotals, StatError, StatOptions, main, stat_loop


def options(**fields: object) -> StatOptions:
    base: dict[str, object] = {
        "topic": "t",
        "channel": "c",
        "interval": 2.0,
        "nsqd_http_addresses": ["127.0.0.1:4151"],
    }
    base.update(fields)
    return StatOptions(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"topic": ""}, "--topic and --channel are required"),
        ({"interval": 0.0}, "--interval should be positive"),
        ({"http_client_connect_timeout": -1.0}, "--http-client-connect-timeout should be positive"),
        ({"count": "0"}, "--count should be positive"),
        ({"nsqd_http_addresses": []}, "--nsqd-http-address or --lookupd-http-address required"),
        (
            {"lookupd_http_addresses": ["127.0.0.1:4161"]},
            "use --nsqd-http-address or --lookupd-http-address not both",
        ),
        (
            {"nsqd_http_addresses": ["http://127.0.0.1:4151"]},
            "--nsqd-http-address error - address should not contain scheme",
        ),
    ],
)
def test_gos_checks(fields: dict[str, object], message: str) -> None:
    with pytest.raises(StatError) as info:
        options(**fields).validate()
    assert str(info.value) == message


def test_count_is_a_number() -> None:
    assert options(count="3").validate() == 3
    assert options().validate() is None


class FakePoller:
    def __init__(self, samples: list[ChannelTotals | None]) -> None:
        self.samples = samples

    def producers(self) -> list[str]:
        return ["n1", "n2"]

    def totals(self, producers: list[str]) -> ChannelTotals | None:
        return self.samples.pop(0)


def totals(messages: int, depth: int, backend: int = 0, clients: int = 2) -> ChannelTotals:
    return ChannelTotals(
        depth=depth,
        memory_depth=depth - backend,
        backend_depth=backend,
        in_flight_count=3,
        deferred_count=1,
        requeue_count=4,
        timeout_count=5,
        message_count=messages,
        client_count=clients,
    )


def test_rows_show_rates_over_the_interval_after_a_baseline() -> None:
    out = io.StringIO()
    sleeps: list[float] = []
    samples = [totals(100, 10), totals(300, 30, backend=5), totals(700, 0)]
    stat_loop(options(), 2, out, FakePoller(samples), sleep=sleeps.append)  # type: ignore[arg-type]
    rows = out.getvalue().removeprefix(HEADER).splitlines()
    assert [row.split() for row in rows] == [
        ["100", "90", "|", "30", "25", "5", "3", "1", "|", "4", "5", "300", "2"],
        ["200", "215", "|", "0", "0", "0", "3", "1", "|", "4", "5", "700", "2"],
    ]
    assert rows[0] == f"{100:7d} {90:7d} | {30:7d} {25:7d} {5:7d} {3:5d} {1:5d} | " + (
        f"{4:7d} {5:7d} {300:12d} {2:7d}"
    )
    assert sleeps == [2.0, 2.0]


def test_a_missing_channel_is_fatal() -> None:
    with pytest.raises(StatError, match=r"failed to find channel\(c\) in stats metadata"):
        stat_loop(options(), 1, io.StringIO(), FakePoller([None]), sleep=lambda s: None)  # type: ignore[arg-type]


def test_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--topic=t"]) == 1
    assert capsys.readouterr().err == "--topic and --channel are required\n"
    assert main(["--nope"]) == 2
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("nsq_stat v1.3.0")
