"""The commands a wheel installs under NSQ's binary names (`nsqd`, `nsqlookupd`, `nsqadmin`,
`nsq_tail`, `nsq_to_file`, `nsq_to_http`, `nsq_to_nsq`, `nsq_stat`, `to_nsq`): each is
``trionsq <name>`` with the same flags, output and exit status, so scripts and client test
harnesses that spawn Go NSQ's binaries by name run them unchanged."""

from __future__ import annotations

import sys
from collections.abc import Callable

from trionsq.cli import main

__all__ = ["NSQ_COMMANDS"]

#: The console scripts pyproject.toml declares, each named as Go NSQ's binary.
NSQ_COMMANDS = (
    "nsqd",
    "nsqlookupd",
    "nsqadmin",
    "nsq_tail",
    "nsq_to_file",
    "nsq_to_http",
    "nsq_to_nsq",
    "nsq_stat",
    "to_nsq",
)


def _command(name: str) -> Callable[[], int]:
    def run() -> int:
        return main([name, *sys.argv[1:]])

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"``{name} [flags]``: ``trionsq {name} [flags]``."
    return run


nsqd = _command("nsqd")
nsqlookupd = _command("nsqlookupd")
nsqadmin = _command("nsqadmin")
nsq_tail = _command("nsq_tail")
nsq_to_file = _command("nsq_to_file")
nsq_to_http = _command("nsq_to_http")
nsq_to_nsq = _command("nsq_to_nsq")
nsq_stat = _command("nsq_stat")
to_nsq = _command("to_nsq")
