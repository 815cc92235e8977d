"""`trionsq tail` (nsq_tail): print the messages of one or more topics to stdout, one per line,
from an ephemeral channel by default; ``-n N`` exits after N messages (docs/protocol.md §11)."""

from __future__ import annotations

import contextlib
import logging
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import trio

from trionsq import __version__
from trionsq.client import Consumer, Message
from trionsq.options import BOOL, INT, STRING, Flag, FlagSet

from .common import (
    AppError,
    Progress,
    check_names,
    check_sources,
    cli,
    config_options,
    consumer_opt_flag,
    repeatable,
    source_flags,
    version_flag,
    wait_for_signal,
)

log = logging.getLogger("trionsq.apps")


@dataclass
class TailOptions:
    version: bool = False
    topics: list[str] = field(default_factory=list)
    channel: str = ""
    max_in_flight: int = 200
    n: int = 0
    print_topic: bool = False
    nsqd_tcp_addresses: list[str] = field(default_factory=list)
    lookupd_http_addresses: list[str] = field(default_factory=list)
    consumer_opts: list[str] = field(default_factory=list)
    consumer_options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Go's checks and adjustments: the random ephemeral channel, -n capping
        max-in-flight."""
        if not self.channel:
            self.channel = f"tail{random.randrange(999999):06d}#ephemeral"
        check_sources(self.nsqd_tcp_addresses, self.lookupd_http_addresses)
        if not self.topics:
            raise AppError("--topic required")
        check_names(self.topics, self.channel)
        self.consumer_options = config_options(self.consumer_opts)
        if 0 < self.n < self.max_in_flight:
            self.max_in_flight = self.n


def tail_flagset() -> FlagSet:
    return FlagSet(
        "nsq_tail",
        [
            version_flag(),
            Flag("channel", STRING, "", "NSQ channel", cfg=None),
            Flag("max-in-flight", INT, 200, "max number of messages to allow in flight", cfg=None),
            Flag("n", INT, 0, "total messages to show (will wait if starved)", cfg=None),
            Flag(
                "print-topic", BOOL, False, "print topic name where message was received", cfg=None
            ),
            *source_flags(),
            repeatable("topic", "NSQ topic (may be given multiple times)", "topics"),
            consumer_opt_flag(),
        ],
    )


def build_options(values: dict[str, Any]) -> TailOptions:
    options = TailOptions(**values)
    options.validate()
    return options


class Tail:
    """The handler: writes ``[topic | ]body\\n`` to `out`; `done` is set after -n messages."""

    def __init__(self, options: TailOptions, out: BinaryIO, progress: Progress) -> None:
        self.options = options
        self.out = out
        self.shown = 0
        self.done = trio.Event()
        self.progress = progress

    def handler(self, topic: str) -> Any:
        prefix = f"{topic} | ".encode() if self.options.print_topic else b""
        total = self.options.n

        async def handle(message: Message) -> None:
            if total and self.shown >= total:
                message.requeue(0, backoff=False)  # not ours to show
                return
            self.shown += 1
            self.out.write(prefix + message.body + b"\n")
            self.out.flush()
            self.progress.add("messages")
            if total and self.shown >= total:
                self.done.set()

        return handle


async def run(options: TailOptions, out: BinaryIO | None = None) -> int:
    """nsq_tail's main: one consumer per topic until -n messages or SIGINT/SIGTERM."""
    stdout = out if out is not None else sys.stdout.buffer
    progress = Progress(["messages"])
    tail = Tail(options, stdout, progress)
    kwargs = dict(options.consumer_options)
    kwargs.setdefault("user_agent", f"nsq_tail/{__version__} trionsq")
    kwargs["max_in_flight"] = options.max_in_flight
    async with contextlib.AsyncExitStack() as stack:
        for topic in options.topics:
            log.info("Adding consumer for topic: %s", topic)
            consumer = Consumer(
                topic,
                options.channel,
                tail.handler(topic),
                nsqd_tcp_addresses=options.nsqd_tcp_addresses,
                lookupd_http_addresses=options.lookupd_http_addresses,
                concurrency=1,
                **kwargs,
            )
            await stack.enter_async_context(consumer)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(progress.run)

            async def stop_on_signal() -> None:
                await wait_for_signal()
                tail.done.set()

            nursery.start_soon(stop_on_signal)
            await tail.done.wait()
            nursery.cancel_scope.cancel()
    return 0


def main(argv: Sequence[str], command: str = "tail") -> int:
    return cli(command, "nsq_tail", tail_flagset(), argv, build_options, run)
