"""`trionsq to_nsq`: read stdin, split it on --delimiter (one byte) and publish every non-empty
record to --topic on every --nsqd-tcp-address, optionally throttled to --rate msgs/s."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from trionsq import __version__
from trionsq.client import ClientError, Producer
from trionsq.options import INT, STRING, Flag, FlagSet
from trionsq.protocol.names import is_valid_topic_name

from .common import (
    AppError,
    Progress,
    check_tcp_addresses,
    cli,
    config_options,
    repeatable,
    version_flag,
    wait_for_signal,
)

log = logging.getLogger("trionsq.apps")

#: Records published in one MPUB when not throttled.
BATCH_COUNT = 500
BATCH_BYTES = 1 << 20
READ_SIZE = 1 << 16


@dataclass
class ToNSQOptions:
    version: bool = False
    topic: str = ""
    delimiter: str = "\n"
    nsqd_tcp_addresses: list[str] = field(default_factory=list)
    producer_opts: list[str] = field(default_factory=list)
    rate: int = 0
    producer_options: dict[str, Any] = field(default_factory=dict)

    @property
    def delimiter_byte(self) -> bytes:
        return self.delimiter.encode("utf-8")

    def validate(self) -> None:
        if not self.topic:
            raise AppError("--topic required")
        if not is_valid_topic_name(self.topic):
            raise AppError("--topic is invalid")
        try:
            delimiter = self.delimiter.encode("utf-8")
        except UnicodeEncodeError:
            delimiter = b""
        if len(delimiter) != 1:
            raise AppError("--delimiter must be a single byte")
        self.producer_options = config_options(self.producer_opts, producer=True)
        if not self.nsqd_tcp_addresses:
            raise AppError("--nsqd-tcp-address required")
        check_tcp_addresses(self.nsqd_tcp_addresses)


def to_nsq_flagset() -> FlagSet:
    return FlagSet(
        "to_nsq",
        [
            version_flag(),
            Flag("topic", STRING, "", "NSQ topic to publish to", cfg=None),
            Flag("delimiter", STRING, "\n", "character to split input from stdin", cfg=None),
            Flag("rate", INT, 0, "Throttle messages to n/second. 0 to disable", cfg=None),
            repeatable(
                "nsqd-tcp-address",
                "destination nsqd TCP address (may be given multiple times)",
                "nsqd_tcp_addresses",
            ),
            repeatable(
                "producer-opt",
                "option to passthrough to nsq.Producer (may be given multiple times, "
                "http://godoc.org/github.com/nsqio/go-nsq#Config)",
                "producer_opts",
            ),
        ],
    )


def build_options(values: dict[str, Any]) -> ToNSQOptions:
    options = ToNSQOptions(**values)
    options.validate()
    return options


class RecordSplitter:
    """Splits a byte stream on one delimiter byte; empty records are dropped (as Go's
    to_nsq skips empty lines). A last record without a delimiter is kept whole."""

    def __init__(self, delimiter: bytes) -> None:
        if len(delimiter) != 1:
            raise ValueError("delimiter must be one byte")
        self.delimiter = delimiter
        self._rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The complete records in `data` (plus what was pending)."""
        if not data:
            return []
        parts = (self._rest + data).split(self.delimiter)
        self._rest = parts.pop()
        return [p for p in parts if p]

    def end(self) -> list[bytes]:
        """At end of input: the pending record, if any."""
        rest, self._rest = self._rest, b""
        return [rest] if rest else []


class TokenBucket:
    """Go to_nsq's throttle: one token every 1/rate s, at most `rate` banked."""

    def __init__(self, rate: int, clock: Callable[[], float] = trio.current_time) -> None:
        self.rate = rate
        self.clock = clock
        self.balance = 1.0
        self.last = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.balance = min(float(self.rate), self.balance + (now - self.last) * self.rate)
        self.last = now

    def delay(self) -> float:
        """Seconds to wait before the next record may go (0 when a token is available)."""
        self._refill()
        return 0.0 if self.balance >= 1 else (1 - self.balance) / self.rate

    def take(self) -> None:
        self._refill()
        self.balance -= 1


async def _read_stdin(stream: Any, send: trio.MemorySendChannel[bytes]) -> None:
    read = getattr(stream, "read1", stream.read)
    async with send:
        while True:
            data = await trio.to_thread.run_sync(read, READ_SIZE, abandon_on_cancel=True)
            if not data:
                return
            await send.send(data)


async def publish_all(producers: Sequence[Producer], topic: str, records: list[bytes]) -> None:
    """Publish `records` (in order) on every producer; raises `AppError` on failure."""

    async def one(producer: Producer) -> None:
        try:
            if len(records) == 1:
                await producer.pub(topic, records[0])
            else:
                await producer.mpub(topic, records)
        except ClientError as exc:
            raise AppError(f"{producer.address}: {exc}") from None

    if len(producers) == 1:
        await one(producers[0])
        return
    async with trio.open_nursery() as nursery:
        for producer in producers:
            nursery.start_soon(one, producer)


def _batches(records: list[bytes]) -> list[list[bytes]]:
    batches: list[list[bytes]] = []
    size = 0
    for record in records:
        if not batches or len(batches[-1]) >= BATCH_COUNT or size + len(record) > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(record)
        size += len(record) + 4
    return batches


async def run(options: ToNSQOptions, stdin: Any = None) -> int:
    """to_nsq's main: publish stdin until EOF (or SIGINT/SIGTERM), then stop the producers."""
    stream = stdin if stdin is not None else sys.stdin.buffer
    kwargs = dict(options.producer_options)
    kwargs.setdefault("user_agent", f"to_nsq/{__version__} trionsq")
    splitter = RecordSplitter(options.delimiter_byte)
    progress = Progress(["published"])
    bucket = TokenBucket(options.rate) if options.rate >= 1 else None
    if bucket is not None:
        log.info("Throttling messages rate to max:%d/second", options.rate)
    producers: list[Producer] = []
    async with contextlib.AsyncExitStack() as stack:
        for address in options.nsqd_tcp_addresses:
            producer = Producer(address, **kwargs)
            try:
                await stack.enter_async_context(producer)
            except ClientError as exc:
                # go-nsq's text (dial tcp ADDR: connect: connection refused), as Go's to_nsq
                # prints it when its first publish cannot connect.
                raise AppError(str(exc)) from None
            producers.append(producer)
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                await wait_for_signal()
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop_on_signal)
            nursery.start_soon(progress.run)
            send, receive = trio.open_memory_channel[bytes](4)
            nursery.start_soon(_read_stdin, stream, send)

            async def publish(records: list[bytes]) -> None:
                if bucket is None:
                    for batch in _batches(records):
                        await publish_all(producers, options.topic, batch)
                        progress.add("published", len(batch))
                    return
                for record in records:
                    wait = bucket.delay()
                    if wait:
                        await trio.sleep(wait)
                    bucket.take()
                    await publish_all(producers, options.topic, [record])
                    progress.add("published")

            async with receive:
                async for data in receive:
                    await publish(splitter.feed(data))
            await publish(splitter.end())
            nursery.cancel_scope.cancel()
    return 0


def main(argv: Sequence[str], command: str = "to_nsq") -> int:
    return cli(command, "to_nsq", to_nsq_flagset(), argv, build_options, run)
