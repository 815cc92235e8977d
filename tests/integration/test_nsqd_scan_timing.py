"""trionsq nsqd's deadline-driven queue scan: message timeouts, REQ delays, TOUCH-extended
deadlines and DPUB defers are honoured within `LATENESS` of their time, far tighter than
the conformance suite's `SCAN_LATENESS` (which allows for Go nsqd's 5 s scan refresh). The
scenarios are the conformance suite's own, run here against a trionsq nsqd subprocess."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.conformance.conftest import Connect, unique_name
from tests.conformance.nsq_conn import NSQConn
from tests.conformance.test_inflight import (
    check_req_with_delay,
    check_timeout_goes_to_another_consumer,
    check_timeout_redelivery,
    check_touch_extends_the_deadline,
)
from tests.conformance.test_publish import check_dpub_deferral
from trionsq.testing import DaemonProcess

#: How late trionsq may honour a deadline: it sleeps until the earliest one, so this is
#: scheduling slack only (the bounds the conformance suite asserted before it allowed for
#: Go's scan).
LATENESS = 2.0

Check = Callable[[Connect, str, str, float], None]


@pytest.fixture(scope="module")
def nsqd() -> Iterator[DaemonProcess]:
    with DaemonProcess("nsqd") as daemon:
        yield daemon


@pytest.fixture
def connect(nsqd: DaemonProcess) -> Iterator[Connect]:
    """`connect(**identify_fields)`: a connection (magic sent), IDENTIFYed when fields are
    given; all are closed after the test."""
    with ExitStack() as stack:

        def _connect(**identify: Any) -> NSQConn:
            conn = stack.enter_context(NSQConn(nsqd.tcp_address))
            if identify:
                conn.negotiate(**identify)
            return conn

        yield _connect


@pytest.mark.parametrize(
    "check",
    [
        check_timeout_redelivery,
        check_timeout_goes_to_another_consumer,
        check_req_with_delay,
        check_touch_extends_the_deadline,
        check_dpub_deferral,
    ],
    ids=lambda check: check.__name__.removeprefix("check_"),
)
def test_deadline_is_honoured_on_time(connect: Connect, check: Check) -> None:
    check(connect, unique_name("scan_t"), unique_name("scan_c"), LATENESS)
