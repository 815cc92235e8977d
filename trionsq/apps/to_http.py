"""`trionsq to_http` (nsq_to_http): consume one topic and POST each message (or GET, with
``%s`` in the URL replaced by the URL-escaped body) to HTTP endpoints; FIN on success, REQ
(with backoff) otherwise.

Modes as Go's: ``round-robin`` and ``hostpool`` / ``epsilon-greedy`` send each message to one
endpoint; an unrecognised --mode falls back to Go's ModeAll, which sends every message to
every endpoint in turn (stopping at the first failure). POST succeeds on 2xx, GET on 200.
"""

from __future__ import annotations

import logging
import random
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from trionsq import __version__
from trionsq.client import Consumer, Message
from trionsq.options import DURATION, FLOAT, INT, STRING, Flag, FlagSet

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
from .hostpool import HostPool, RoundRobin

log = logging.getLogger("trionsq.apps")

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MODE_ALL, MODE_ROUND_ROBIN, MODE_HOST_POOL = "all", "round-robin", "hostpool"


@dataclass
class ToHTTPOptions:
    version: bool = False
    topic: str = ""
    channel: str = "nsq_to_http"
    max_in_flight: int = 200
    n: int = 100
    mode: str = "hostpool"
    sample: float = 1.0
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 20.0
    status_every: int = 250
    content_type: str = DEFAULT_CONTENT_TYPE
    post: list[str] = field(default_factory=list)
    get: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    nsqd_tcp_addresses: list[str] = field(default_factory=list)
    lookupd_http_addresses: list[str] = field(default_factory=list)
    consumer_opts: list[str] = field(default_factory=list)
    consumer_options: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def selected_mode(self) -> str:
        if self.mode == "round-robin":
            return MODE_ROUND_ROBIN
        if self.mode in ("hostpool", "epsilon-greedy"):
            return MODE_HOST_POOL
        return MODE_ALL

    @property
    def addresses(self) -> list[str]:
        return self.post or self.get

    def validate(self) -> None:
        """Go's checks, in its order."""
        if self.header:
            try:
                self.headers = parse_custom_headers(self.header)
            except ValueError:
                raise AppError("--header value format should be 'key=value'") from None
        if not self.topic or not self.channel:
            raise AppError("--topic and --channel are required")
        if self.content_type != DEFAULT_CONTENT_TYPE:
            if not self.post:
                raise AppError("--content-type only used with --post")
            if not self.content_type:
                raise AppError("--content-type requires a value when used")
        check_sources(self.nsqd_tcp_addresses, self.lookupd_http_addresses)
        if not self.get and not self.post:
            raise AppError("--get or --post required")
        if self.get and self.post:
            raise AppError("use --get or --post not both")
        for address in self.get:
            if address.count("%s") != 1:
                raise AppError("invalid GET address - must be a printf string")
        if self.sample > 1.0 or self.sample < 0.0:
            raise AppError("ERROR: --sample must be between 0.0 and 1.0")
        if self.n < 1:
            raise AppError("-n must be positive")
        check_names([self.topic], self.channel)
        self.consumer_options = config_options(self.consumer_opts)


def parse_custom_headers(values: Sequence[str]) -> dict[str, str]:
    """Go's parseCustomHeaders: each ``Key: value`` (split on the first ``:``, trimmed)."""
    headers: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition(":")
        key, val = key.strip(), val.strip()
        if not sep or not key or not val:
            raise ValueError(f"invalid header: {value!r}")
        headers[key] = val
    return headers


def get_url(template: str, body: bytes) -> str:
    """The GET URL: ``%s`` replaced by the body escaped as Go's url.QueryEscape."""
    return template.replace("%s", urllib.parse.quote_plus(body, safe=""), 1)


def to_http_flagset() -> FlagSet:
    def f(name: str, kind: str, default: Any, help_: str) -> Flag:
        return Flag(name, kind, default, help_, cfg=None)

    return FlagSet(
        "nsq_to_http",
        [
            version_flag(),
            f("topic", STRING, "", "nsq topic"),
            f("channel", STRING, "nsq_to_http", "nsq channel"),
            f("max-in-flight", INT, 200, "max number of messages to allow in flight"),
            f("n", INT, 100, "number of concurrent publishers"),
            f(
                "mode",
                STRING,
                "hostpool",
                "the upstream request mode options: round-robin, hostpool (default), "
                "epsilon-greedy",
            ),
            f("sample", FLOAT, 1.0, "% of messages to publish (float b/w 0 -> 1)"),
            f("http-client-connect-timeout", DURATION, 2.0, "timeout for HTTP connect"),
            f("http-client-request-timeout", DURATION, 20.0, "timeout for HTTP request"),
            f(
                "status-every",
                INT,
                250,
                "the # of requests between logging status (per handler), 0 disables",
            ),
            f(
                "content-type",
                STRING,
                DEFAULT_CONTENT_TYPE,
                "the Content-Type used for POST requests",
            ),
            repeatable(
                "post",
                "HTTP address to make a POST request to.  data will be in the body "
                "(may be given multiple times)",
            ),
            repeatable("header", "Custom header for HTTP requests (may be given multiple times)"),
            repeatable(
                "get",
                "HTTP address to make a GET request to. '%s' will be printf replaced with "
                "data (may be given multiple times)",
            ),
            *source_flags(),
            consumer_opt_flag(),
        ],
    )


def build_options(values: dict[str, Any]) -> ToHTTPOptions:
    options = ToHTTPOptions(**values)
    options.validate()
    return options


class TimerMetrics:
    """bitly/timer_metrics: every `status_every` requests, log the count, average and
    percentiles of the request durations since the last report."""

    def __init__(self, status_every: int, prefix: str) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self.count = 0
        self.durations: list[float] = []

    def status(self, start: float) -> None:
        if self.status_every <= 0:
            return
        self.durations.append(time.monotonic() - start)
        self.count += 1
        if len(self.durations) >= self.status_every:
            d = sorted(self.durations)
            self.durations = []

            def pct(p: float) -> float:
                return d[min(len(d) - 1, int(len(d) * p))] * 1000

            log.info(
                "%s finished %d requests - 99th: %.2fms - 95th: %.2fms - avg: %.2fms",
                self.prefix,
                self.count,
                pct(0.99),
                pct(0.95),
                sum(d) / len(d) * 1000,
            )


class Publisher:
    """The handler: sends a message to the endpoint(s) the mode picks."""

    def __init__(self, options: ToHTTPOptions, client: httpx.AsyncClient, progress: Progress):
        self.options = options
        self.client = client
        self.progress = progress
        self.mode = options.selected_mode
        addresses = options.addresses
        self.round_robin = RoundRobin(addresses)
        self.host_pool = HostPool(addresses)
        every = 0 if len(addresses) == 1 else options.status_every
        self.per_address = {a: TimerMetrics(every, f"[{a}]:") for a in addresses}
        self.aggregate = TimerMetrics(options.status_every, "[aggregate]:")
        self.headers = {"User-Agent": f"nsq_to_http v{__version__}", **options.headers}

    async def publish(self, address: str, body: bytes) -> None:
        """One request; raises on a transport error or a failing status."""
        if self.options.post:
            headers = dict(self.headers)
            headers["Content-Type"] = self.options.content_type
            headers.update(self.options.headers)
            response = await self.client.post(address, content=body, headers=headers)
            ok = 200 <= response.status_code < 300
        else:
            response = await self.client.get(get_url(address, body), headers=self.headers)
            ok = response.status_code == 200
        if not ok:
            raise RuntimeError(f"got status code {response.status_code}")

    async def handle(self, message: Message) -> None:
        if self.options.sample < 1.0 and random.random() > self.options.sample:
            return
        start = time.monotonic()
        try:
            if self.mode == MODE_ALL:
                for address in self.options.addresses:
                    st = time.monotonic()
                    await self.publish(address, message.body)
                    self.per_address[address].status(st)
            elif self.mode == MODE_ROUND_ROBIN:
                address = self.round_robin.get()
                await self.publish(address, message.body)
                self.per_address[address].status(start)
            else:
                address = self.host_pool.get()
                try:
                    await self.publish(address, message.body)
                except BaseException:
                    self.host_pool.mark(address, ok=False)
                    raise
                self.host_pool.mark(address, ok=True)
                self.per_address[address].status(start)
        except (httpx.HTTPError, RuntimeError) as exc:
            self.progress.add("failed")
            log.warning("%s: requeueing %s", exc, message.id.decode())
            raise
        self.aggregate.status(start)
        self.progress.add("delivered")


async def run(options: ToHTTPOptions) -> int:
    timeout = httpx.Timeout(
        options.http_client_request_timeout, connect=options.http_client_connect_timeout
    )
    limits = httpx.Limits(max_connections=options.n, max_keepalive_connections=options.n)
    progress = Progress(["delivered", "failed"])
    kwargs = dict(options.consumer_options)
    kwargs.setdefault("user_agent", f"nsq_to_http/{__version__} trionsq")
    kwargs["max_in_flight"] = options.max_in_flight
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        publisher = Publisher(options, client, progress)
        consumer = Consumer(
            options.topic,
            options.channel,
            publisher.handle,
            nsqd_tcp_addresses=options.nsqd_tcp_addresses,
            lookupd_http_addresses=options.lookupd_http_addresses,
            concurrency=options.n,
            **kwargs,
        )
        async with consumer, trio.open_nursery() as nursery:
            nursery.start_soon(progress.run)
            await wait_for_signal()
            nursery.cancel_scope.cancel()
    return 0


def main(argv: Sequence[str], command: str = "to_http") -> int:
    return cli(command, "nsq_to_http", to_http_flagset(), argv, build_options, run)
