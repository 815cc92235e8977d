"""`trionsq nsq_to_nsq`: relay topics from one cluster (--nsqd-tcp-address or
--lookupd-http-address) to --destination-nsqd-tcp-address nsqds: FIN once the destination
accepted the message, REQ (with backoff) when publishing failed. Optional JSON filtering
(--require-json-field/--require-json-value, --whitelist-json-field) as Go's."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from trionsq import __version__
from trionsq.client import ClientError, Consumer, Message, Producer
from trionsq.options import INT, STRING, Flag, FlagSet
from trionsq.protocol.names import is_valid_topic_name

from .common import (
    AppError,
    Progress,
    check_names,
    check_sources,
    check_tcp_addresses,
    cli,
    config_options,
    repeatable,
    version_flag,
    wait_for_signal,
)
from .hostpool import HostPool, RoundRobin
from .to_http import TimerMetrics

log = logging.getLogger("trionsq.apps")


@dataclass
class ToNSQRelayOptions:
    version: bool = False
    channel: str = "nsq_to_nsq"
    destination_topic: str = ""
    max_in_flight: int = 200
    status_every: int = 250
    mode: str = "hostpool"
    require_json_field: str = ""
    require_json_value: str = ""
    nsqd_tcp_addresses: list[str] = field(default_factory=list)
    lookupd_http_addresses: list[str] = field(default_factory=list)
    destination_nsqd_tcp_addresses: list[str] = field(default_factory=list)
    whitelist_json_fields: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    consumer_opts: list[str] = field(default_factory=list)
    producer_opts: list[str] = field(default_factory=list)
    consumer_options: dict[str, Any] = field(default_factory=dict)
    producer_options: dict[str, Any] = field(default_factory=dict)

    @property
    def round_robin(self) -> bool:
        """Go: "hostpool"/"epsilon-greedy" pick the host pool, anything else round-robin."""
        return self.mode not in ("hostpool", "epsilon-greedy")

    def validate(self) -> None:
        if not self.topics or not self.channel:
            raise AppError("--topic and --channel are required")
        for topic in self.topics:
            if not is_valid_topic_name(topic):
                raise AppError("--topic is invalid")
        if self.destination_topic and not is_valid_topic_name(self.destination_topic):
            raise AppError("--destination-topic is invalid")
        try:
            check_names([], self.channel)
        except AppError:
            raise AppError("--channel is invalid") from None
        check_sources(self.nsqd_tcp_addresses, self.lookupd_http_addresses)
        if not self.destination_nsqd_tcp_addresses:
            raise AppError("--destination-nsqd-tcp-address required")
        check_tcp_addresses(self.destination_nsqd_tcp_addresses)
        self.consumer_options = config_options(self.consumer_opts)
        self.producer_options = config_options(self.producer_opts, producer=True)


def nsq_to_nsq_flagset() -> FlagSet:
    def f(name: str, kind: str, default: Any, help_: str) -> Flag:
        return Flag(name, kind, default, help_, cfg=None)

    return FlagSet(
        "nsq_to_nsq",
        [
            version_flag(),
            f("channel", STRING, "nsq_to_nsq", "nsq channel"),
            f(
                "destination-topic",
                STRING,
                "",
                "use this destination topic for all consumed topics (default is consumed "
                "topic name)",
            ),
            f("max-in-flight", INT, 200, "max number of messages to allow in flight"),
            f(
                "status-every",
                INT,
                250,
                "the # of requests between logging status (per destination), 0 disables",
            ),
            f(
                "mode",
                STRING,
                "hostpool",
                "the upstream request mode options: round-robin, hostpool (default), "
                "epsilon-greedy",
            ),
            f(
                "require-json-field",
                STRING,
                "",
                "for JSON messages: only pass messages that contain this field",
            ),
            f(
                "require-json-value",
                STRING,
                "",
                "for JSON messages: only pass messages in which the required field has this value",
            ),
            repeatable(
                "nsqd-tcp-address",
                "nsqd TCP address (may be given multiple times)",
                "nsqd_tcp_addresses",
            ),
            repeatable(
                "destination-nsqd-tcp-address",
                "destination nsqd TCP address (may be given multiple times)",
                "destination_nsqd_tcp_addresses",
            ),
            repeatable(
                "lookupd-http-address",
                "lookupd HTTP address (may be given multiple times)",
                "lookupd_http_addresses",
            ),
            repeatable("topic", "nsq topic (may be given multiple times)", "topics"),
            repeatable(
                "whitelist-json-field",
                "for JSON messages: pass this field (may be given multiple times)",
                "whitelist_json_fields",
            ),
            repeatable(
                "consumer-opt",
                "option to passthrough to nsq.Consumer (may be given multiple times, see "
                "http://godoc.org/github.com/nsqio/go-nsq#Config)",
                "consumer_opts",
            ),
            repeatable(
                "producer-opt",
                "option to passthrough to nsq.Producer (may be given multiple times, see "
                "http://godoc.org/github.com/nsqio/go-nsq#Config)",
                "producer_opts",
            ),
        ],
    )


def build_options(values: dict[str, Any]) -> ToNSQRelayOptions:
    options = ToNSQRelayOptions(**values)
    options.validate()
    return options


# -- JSON filtering ---------------------------------------------------------------------


def _go_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if "_" in text else value


def should_pass(js: dict[str, Any], field_: str, value: str) -> tuple[bool, bool]:
    """Go's shouldPassMessage: (pass, backoff). No `field_`: pass. A missing field fails (and
    asks for backoff when a value is required); a required value matches a JSON string
    exactly or a JSON number numerically; anything else fails."""
    if not field_:
        return True, False
    if field_ not in js:
        return False, bool(value)
    if not value:
        return True, False
    v = js[field_]
    if isinstance(v, str):
        return v == value, False
    number = _go_float(value)
    if number is not None and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) == number, False
    return False, False


def _go_marshal_value(value: Any) -> Any:
    # Go decodes JSON numbers to float64 and re-encodes integral ones as int64.
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(float(value)) if abs(value) >= 2**53 else value
    return value


def go_json_dumps(obj: dict[str, Any]) -> bytes:
    """encoding/json.Marshal of a map: sorted keys, compact, HTML characters escaped."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text.encode("utf-8")


def filter_message(js: dict[str, Any], raw: bytes, whitelist: Sequence[str]) -> bytes:
    """Go's filterMessage: without a whitelist the raw body, else a JSON object of just the
    whitelisted fields present."""
    if not whitelist:
        return raw
    return go_json_dumps({k: _go_marshal_value(js[k]) for k in whitelist if k in js})


class Backoff(Exception):
    """A message that fails the JSON filter in a way Go answers with a backoff requeue."""


def transform(options: ToNSQRelayOptions, body: bytes) -> bytes | None:
    """The body to relay, None to drop the message (FIN it), or raises `Backoff`."""
    if not options.require_json_field and not options.whitelist_json_fields:
        return body
    try:
        js = json.loads(body)
    except ValueError:
        js = None
    if not isinstance(js, dict):
        log.error("Unable to decode json: %r", body)
        return None
    passed, backoff = should_pass(js, options.require_json_field, options.require_json_value)
    if not passed:
        if backoff:
            log.error("missing field to check required value")
            raise Backoff("backoff")
        return None
    return filter_message(js, body, options.whitelist_json_fields)


# -- relaying ---------------------------------------------------------------------------


class Relay:
    def __init__(
        self, options: ToNSQRelayOptions, producers: dict[str, Producer], progress: Progress
    ) -> None:
        self.options = options
        self.producers = producers
        self.progress = progress
        addresses = options.destination_nsqd_tcp_addresses
        self.picker: RoundRobin | HostPool = (
            RoundRobin(addresses) if options.round_robin else HostPool(addresses)
        )
        every = 0 if len(addresses) == 1 else options.status_every
        self.per_address = {a: TimerMetrics(every, f"[{a}]:") for a in addresses}
        self.aggregate = TimerMetrics(options.status_every, "[aggregate]:")

    def handler(self, destination_topic: str) -> Any:
        async def handle(message: Message) -> None:
            body = transform(self.options, message.body)
            if body is None:
                self.progress.add("filtered")
                return
            start = time.monotonic()
            address = self.picker.get()
            try:
                await self.producers[address].pub(destination_topic, body)
            except ClientError:
                self.picker.mark(address, ok=False)
                self.progress.add("failed")
                raise
            self.picker.mark(address, ok=True)
            self.per_address[address].status(start)
            self.aggregate.status(start)
            self.progress.add("relayed")

        return handle


async def run(options: ToNSQRelayOptions) -> int:
    ua = f"nsq_to_nsq/{__version__} trionsq"
    consumer_kwargs = dict(options.consumer_options)
    consumer_kwargs.setdefault("user_agent", ua)
    consumer_kwargs["max_in_flight"] = options.max_in_flight
    producer_kwargs = dict(options.producer_options)
    producer_kwargs.setdefault("user_agent", ua)
    progress = Progress(["relayed", "failed", "filtered"])
    async with contextlib.AsyncExitStack() as stack:
        producers: dict[str, Producer] = {}
        for address in options.destination_nsqd_tcp_addresses:
            producer = Producer(address, **producer_kwargs)
            try:
                await stack.enter_async_context(producer)
            except ClientError as exc:
                # go-nsq's text (dial tcp ADDR: connect: connection refused); Go's producers
                # connect at the first publish, so Go would start and fail each message.
                raise AppError(str(exc)) from None
            producers[address] = producer
        relay = Relay(options, producers, progress)
        for topic in options.topics:
            consumer = Consumer(
                topic,
                options.channel,
                relay.handler(options.destination_topic or topic),
                nsqd_tcp_addresses=options.nsqd_tcp_addresses,
                lookupd_http_addresses=options.lookupd_http_addresses,
                concurrency=max(options.max_in_flight, 1),
                **consumer_kwargs,
            )
            await stack.enter_async_context(consumer)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(progress.run)
            await wait_for_signal()
            nursery.cancel_scope.cancel()
    return 0


def main(argv: Sequence[str], command: str = "nsq_to_nsq") -> int:
    return cli(command, "nsq_to_nsq", nsq_to_nsq_flagset(), argv, build_options, run)
