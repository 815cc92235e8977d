"""The sink: ``df.write.format("nsq")`` and ``df.writeStream.format("nsq")``.

Each Spark task publishes its partition with `publish_rows`: one `trio.run` with a `Producer`
per nsqd, rows grouped per topic into MPUBs of at most ``batchSize`` messages / ``batchBytes``
bytes, up to ``maxPipeline`` MPUBs outstanding. An NSQ error (or a lost connection) raises, so
the task, and with it the Spark job, fails with the NSQ error text. A retried task publishes
its partition again: the sink is at-least-once, as NSQ itself is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import trio
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from ..client.errors import ClientError, NSQError
from ..client.producer import Producer
from .options import OptionError, SinkOptions

__all__ = ["NSQStreamWriter", "NSQWriter", "PublishedMessage", "publish_rows", "sink_columns"]


@dataclass
class PublishedMessage(WriterCommitMessage):
    """What one task published."""

    messages: int
    bytes: int


def sink_columns(schema: StructType, options: SinkOptions) -> tuple[int, int | None]:
    """Positions of the body column (``body``, else ``value``) and of the ``topic`` column
    (None when the ``topic`` option names the topic)."""
    names = [f.name.lower() for f in schema.fields]
    for candidate in ("body", "value"):
        if candidate in names:
            body = names.index(candidate)
            break
    else:
        raise OptionError("the nsq sink needs a body (or value) column, binary or string")
    if not isinstance(schema.fields[body].dataType, BinaryType | StringType):
        raise OptionError(
            f"column {schema.fields[body].name}: binary or string expected, "
            f"not {schema.fields[body].dataType.simpleString()}"
        )
    if options.topic:
        return body, None
    if "topic" not in names:
        raise OptionError("give the topic option or a topic column")
    return body, names.index("topic")


def nsqd_addresses(options: SinkOptions) -> list[str]:
    """The nsqds to publish to: the ``nsqd`` option, else every nsqd the lookupds know."""
    if options.nsqd:
        return list(options.nsqd)
    import httpx

    found: set[str] = set()
    with httpx.Client(timeout=5.0) as client:
        for lookupd in options.lookupd:
            url = lookupd if "://" in lookupd else "http://" + lookupd
            try:
                response = client.get(
                    url.rstrip("/") + "/nodes",
                    headers={"Accept": "application/vnd.nsq; version=1.0"},
                )
                response.raise_for_status()
            except httpx.HTTPError as exc:
                raise NSQError("E_LOOKUP", f"lookupd {lookupd}: {exc}") from exc
            body = response.json()
            data = body.get("data", body)
            for producer in data.get("producers") or []:
                host = producer.get("broadcast_address")
                if host and producer.get("tcp_port"):
                    found.add(f"{host}:{producer['tcp_port']}")
    if not found:
        raise NSQError("E_NO_NSQD", f"no nsqd registered with lookupd {','.join(options.lookupd)}")
    return sorted(found)


def _bodies(rows: Iterable[Any], body: int, topic: int | None, fixed: str) -> Iterator[Any]:
    for row in rows:
        value = row[body]
        if value is None:
            raise ValueError("the nsq sink cannot publish a null body")
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif not isinstance(value, bytes):
            value = bytes(value)
        name = fixed if topic is None else row[topic]
        if name is None:
            raise ValueError("the nsq sink cannot publish a row whose topic is null")
        yield name, value


def publish_rows(
    rows: Iterable[Any], options: SinkOptions, body: int, topic: int | None, start: int = 0
) -> PublishedMessage:
    """Publish `rows` (synchronously, from an executor). Batches go to the nsqds round-robin,
    beginning with the `start`-th (the partition id spreads tasks)."""
    return trio.run(_publish, rows, options, body, topic, start)


async def _publish(
    rows: Iterable[Any], options: SinkOptions, body: int, topic: int | None, start: int
) -> PublishedMessage:
    addresses = nsqd_addresses(options)
    count = size = 0
    turn = start
    pending: dict[str, tuple[list[bytes], list[int]]] = {}
    try:
        async with contextlib.AsyncExitStack() as stack:
            producers: list[Producer] = []
            for address in addresses:
                producer = Producer(
                    address,
                    max_pipeline=options.max_pipeline,
                    connect_timeout=options.connect_timeout,
                    **options.security.kwargs(),
                )
                try:
                    producers.append(await stack.enter_async_context(producer))
                except ClientError as exc:
                    raise _error(exc, address, "", 0) from exc
            limiter = trio.Semaphore(options.max_pipeline * len(producers))
            async with trio.open_nursery() as nursery:

                async def send(producer: Producer, name: str, bodies: list[bytes]) -> None:
                    try:
                        await producer.mpub(name, bodies)
                    except ClientError as exc:
                        raise _error(exc, producer.address, name, len(bodies)) from exc
                    finally:
                        limiter.release()

                async def flush(name: str, bodies: list[bytes]) -> None:
                    nonlocal turn
                    await limiter.acquire()
                    producer = producers[turn % len(producers)]
                    turn += 1
                    nursery.start_soon(send, producer, name, bodies)

                for name, value in _bodies(rows, body, topic, options.topic):
                    batch = pending.get(name)
                    if batch is None:
                        batch = pending[name] = ([], [0])
                    batch[0].append(value)
                    batch[1][0] += len(value) + 4
                    count += 1
                    size += len(value)
                    if len(batch[0]) >= options.batch_size or batch[1][0] >= options.batch_bytes:
                        del pending[name]
                        await flush(name, batch[0])
                for name, (bodies, _) in pending.items():
                    await flush(name, bodies)
    except BaseExceptionGroup as group:
        first = _first(group)
        raise first from first.__cause__
    return PublishedMessage(count, size)


class PublishError(NSQError):
    """An MPUB that failed: the NSQ error with where it happened."""


def _error(exc: ClientError, address: str, topic: str, n: int) -> NSQError:
    if isinstance(exc, NSQError):
        code, text = exc.code, exc.text
    else:
        code, text = "E_CONNECTION", str(exc) + (f": {exc.__cause__}" if exc.__cause__ else "")
    where = f"MPUB of {n} messages to topic {topic!r} on {address}" if n else f"nsqd {address}"
    return PublishError(code, f"{text} ({where})")


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        assert isinstance(exc, BaseException)
        return exc
    return group


class _Publishing:
    """What both writers do in a task: publish the partition's rows."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.body, self.topic = sink_columns(schema, options)

    def write(self, iterator: Iterator[Any]) -> PublishedMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        start = context.partitionId() if context is not None else 0
        return publish_rows(iterator, self.options, self.body, self.topic, start)


class NSQWriter(_Publishing, DataSourceWriter):
    """``df.write.format("nsq")``: every task publishes its rows."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # published already: NSQ has no transactions to commit

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # what was published stays published (at-least-once)


class NSQStreamWriter(_Publishing, DataSourceStreamWriter):
    """``writeStream.format("nsq")``: each micro-batch's tasks publish their rows."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
