"""Options shared by the whole suite, registered at its root so that
`pytest tests --nsqd-tcp-address=...` works as well as `pytest tests/conformance ...`
(likewise `--nsqlookupd-tcp-address` / `--nsqlookupd-http-address`)."""

from __future__ import annotations

import pytest

from tests.small_disk import small_disk  # noqa: F401 (a fixture for the disk-fault tests)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nsq conformance")
    group.addoption(
        "--nsqd-tcp-address",
        default=None,
        help="HOST:PORT of the nsqd to test (default: start trionsq nsqd)",
    )
    group.addoption(
        "--nsqd-http-address",
        default=None,
        help="HOST:PORT of that nsqd's HTTP API (tests that need it skip without it)",
    )
    group.addoption(
        "--nsqlookupd-tcp-address",
        default=None,
        help="HOST:PORT of the nsqlookupd to test (default: start trionsq nsqlookupd "
        "unless --nsqlookupd-http-address is given)",
    )
    group.addoption(
        "--nsqlookupd-http-address",
        default=None,
        help="HOST:PORT of that nsqlookupd's HTTP API (tests that need it skip without it)",
    )
    group.addoption(
        "--nsq-bin-dir",
        default=None,
        help="directory of NSQ's programs (nsqd, nsqlookupd, nsq_tail, ...) whose --version "
        "the suite checks (default: trionsq's commands)",
    )
    stateful = parser.getgroup("stateful tests")
    stateful.addoption(
        "--stateful-examples",
        type=int,
        default=None,
        help="Hypothesis examples per stateful test (default: a quick run for CI)",
    )
    crash = parser.getgroup("crash tests")
    crash.addoption(
        "--crash-trials",
        type=int,
        default=3,
        help="kill -9 trials in tests/integration/test_nsqd_crash.py (default 3; 50: long run)",
    )
    crash.addoption(
        "--replication-trials",
        type=int,
        default=2,
        help="kill -9 trials of a replicated topic's primary in "
        "tests/integration/test_replication_kill.py (default 2; bench/replication-trials: more)",
    )
