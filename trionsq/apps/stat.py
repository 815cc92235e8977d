"""`trionsq stat` (nsq_stat): poll ``/stats`` of every nsqd that has a topic and print one
channel's totals across them, with nsq_stat's flags and table (docs/protocol.md §11).

The producers come from ``--lookupd-http-address`` (``/lookup``) or from the
``--nsqd-http-address`` list (those whose ``/stats`` has the topic). Every ``--interval`` a row
shows the ingress and egress rates since the previous poll, the depths, in-flight, deferred,
requeued and timed-out counts, messages and clients; a header every 25 rows. ``--count N``
prints N rows, then exits.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx

from trionsq.goerrors import http_error
from trionsq.options import (
    BOOL,
    DURATION,
    STRING,
    STRINGS,
    Flag,
    FlagError,
    FlagSet,
    HelpRequested,
)
from trionsq.version import app_version_string

HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    f"{'ingress':>7} {'egress':>7} | {'total':>7} {'mem':>7} {'disk':>7} {'inflt':>5} {'def':>5} | "
    f"{'req':>7} {'t-o':>7} {'msgs':>12} {'clients':>7}\n"
)
ROW = "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n"
HEADER_EVERY = 25


class StatError(Exception):
    """nsq_stat's fatal errors (one line, exit 1)."""


@dataclass
class StatOptions:
    version: bool = False
    topic: str = ""
    channel: str = ""
    interval: float = 2.0
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    count: str = ""
    nsqd_http_addresses: list[str] = field(default_factory=list)
    lookupd_http_addresses: list[str] = field(default_factory=list)

    def validate(self) -> int | None:
        """Go's checks, in its order; returns --count as a number (None when not given)."""
        if not self.topic or not self.channel:
            raise StatError("--topic and --channel are required")
        if self.interval <= 0:
            raise StatError("--interval should be positive")
        if self.http_client_connect_timeout <= 0:
            raise StatError("--http-client-connect-timeout should be positive")
        if self.http_client_request_timeout <= 0:
            raise StatError("--http-client-request-timeout should be positive")
        count = None
        if self.count:
            try:
                count = int(self.count)
            except ValueError:
                raise StatError(f'invalid value "{self.count}" for flag -count') from None
            if count <= 0:
                raise StatError("--count should be positive")
        if not self.nsqd_http_addresses and not self.lookupd_http_addresses:
            raise StatError("--nsqd-http-address or --lookupd-http-address required")
        if self.nsqd_http_addresses and self.lookupd_http_addresses:
            raise StatError("use --nsqd-http-address or --lookupd-http-address not both")
        for flag, addresses in (
            ("--nsqd-http-address", self.nsqd_http_addresses),
            ("--lookupd-http-address", self.lookupd_http_addresses),
        ):
            if any(a.startswith("http") for a in addresses):
                raise StatError(f"{flag} error - address should not contain scheme")
        return count


def stat_flagset() -> FlagSet:
    base = StatOptions()
    return FlagSet(
        "nsq_stat",
        [
            Flag("version", BOOL, False, "print version", cfg=None),
            Flag("topic", STRING, "", "NSQ topic", cfg=None),
            Flag("channel", STRING, "", "NSQ channel", cfg=None),
            Flag(
                "interval",
                DURATION,
                base.interval,
                "duration of time between polling/printing output",
                cfg=None,
            ),
            Flag(
                "http-client-connect-timeout", DURATION, 2.0, "timeout for HTTP connect", cfg=None
            ),
            Flag(
                "http-client-request-timeout", DURATION, 5.0, "timeout for HTTP request", cfg=None
            ),
            Flag("count", STRING, "", "number of reports", cfg=None, type_name="N"),
            Flag(
                "nsqd-http-address",
                STRINGS,
                [],
                "nsqd HTTP address (may be given multiple times)",
                field="nsqd_http_addresses",
                cfg=None,
            ),
            Flag(
                "lookupd-http-address",
                STRINGS,
                [],
                "lookupd HTTP address (may be given multiple times)",
                field="lookupd_http_addresses",
                cfg=None,
            ),
        ],
    )


@dataclass
class ChannelTotals:
    """One channel's counts summed over the nsqds (Go's clusterinfo.ChannelStats)."""

    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    message_count: int = 0
    client_count: int = 0

    def add(self, channel: dict[str, Any]) -> None:
        self.depth += channel["depth"]
        self.backend_depth += channel["backend_depth"]
        self.memory_depth += channel["depth"] - channel["backend_depth"]
        self.in_flight_count += channel["in_flight_count"]
        self.deferred_count += channel["deferred_count"]
        self.requeue_count += channel["requeue_count"]
        self.timeout_count += channel["timeout_count"]
        self.message_count += channel["message_count"]
        self.client_count += channel.get("client_count", len(channel.get("clients") or []))


class Poller:
    """Finds the topic's producers and sums the channel's stats over them."""

    def __init__(self, options: StatOptions) -> None:
        self.options = options
        timeout = httpx.Timeout(
            options.http_client_request_timeout, connect=options.http_client_connect_timeout
        )
        self.http = httpx.Client(
            timeout=timeout, headers={"Accept": "application/vnd.nsq; version=1.0"}
        )

    def close(self) -> None:
        self.http.close()

    def producers(self) -> list[str]:
        """The topic's nsqds (HTTP addresses); Go's ``failed to get topic producers`` error
        when a lookupd (or nsqd) cannot be queried."""
        topic = self.options.topic
        found: dict[str, None] = {}

        def from_lookupd(lookupd: str) -> None:
            query = urllib.parse.urlencode({"topic": topic})
            data = self._get(f"http://{lookupd}/lookup?{query}")
            for producer in data.get("producers") or []:
                host = producer["broadcast_address"]
                host = f"[{host}]" if ":" in host else host
                found[f"{host}:{producer['http_port']}"] = None

        def from_nsqd(nsqd: str) -> None:
            query = urllib.parse.urlencode(
                {"format": "json", "topic": topic, "include_clients": "false"}
            )
            data = self._get(f"http://{nsqd}/stats?{query}")
            if any(t["topic_name"] == topic for t in data.get("topics") or []):
                found[nsqd] = None

        if self.options.lookupd_http_addresses:
            _query_each(
                "failed to get topic producers",
                "nsqlookupd",
                self.options.lookupd_http_addresses,
                from_lookupd,
            )
        else:
            _query_each(
                "failed to get topic producers",
                "nsqd",
                self.options.nsqd_http_addresses,
                from_nsqd,
            )
        return list(found)

    def totals(self, producers: Sequence[str]) -> ChannelTotals | None:
        """The channel's counts summed over `producers`; Go's ``failed to get nsqd stats``
        error when one cannot be queried."""
        totals: ChannelTotals | None = None
        opts = self.options

        def add(nsqd: str) -> None:
            nonlocal totals
            query = urllib.parse.urlencode(
                {
                    "format": "json",
                    "topic": opts.topic,
                    "channel": opts.channel,
                    "include_clients": "false",
                }
            )
            for topic in self._get(f"http://{nsqd}/stats?{query}").get("topics") or []:
                if topic["topic_name"] != opts.topic:
                    continue
                for channel in topic.get("channels") or []:
                    if channel["channel_name"] == opts.channel:
                        totals = totals or ChannelTotals()
                        totals.add(channel)

        _query_each("failed to get nsqd stats", "nsqd", producers, add)
        return totals

    def _get(self, url: str) -> dict[str, Any]:
        """GET `url`'s JSON; `_GetError` in Go's http client words."""
        try:
            response = self.http.get(url)
        except httpx.HTTPError as err:
            raise _GetError(http_error(url, err)) from None
        if response.status_code != 200:
            status = f"{response.status_code} {response.reason_phrase}"
            raise _GetError(f"got response {status} {json.dumps(response.text)}")
        try:
            data = response.json()
        except ValueError as err:
            raise _GetError(str(err)) from None
        return data if isinstance(data, dict) else {}


class _GetError(Exception):
    """One failed query, in Go's words."""


def _query_each(
    what: str, kind: str, addresses: Sequence[str], query: Callable[[str], None]
) -> None:
    """`query` every address; any failure is nsq_stat's fatal ``ERROR: <what> - ...``, with
    Go's ``failed to query any <kind>: `` when all of them failed (its errors joined by
    ``; `` where Go puts a newline, so that it stays one line)."""
    errors: list[str] = []
    for address in addresses:
        try:
            query(address)
        except _GetError as err:
            errors.append(str(err))
    if errors:
        text = "; ".join(errors)
        if len(errors) == len(addresses):
            text = f"failed to query any {kind}: {text}"
        raise StatError(f"ERROR: {what} - {text}")


def stat_loop(
    options: StatOptions,
    count: int | None,
    out: TextIO,
    poller: Poller,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """nsq_stat's loop: the first poll is the baseline, then one row per interval."""
    previous: ChannelTotals | None = None
    i = 0
    while count is None or count >= i:
        producers = poller.producers()
        current = poller.totals(producers)
        if current is None:
            raise StatError(
                f"ERROR: failed to find channel({options.channel}) in stats metadata "
                f"for topic({options.topic})"
            )
        if i % HEADER_EVERY == 0:
            out.write(HEADER)
        if previous is not None:
            seconds = options.interval
            ingress = current.message_count - previous.message_count
            egress = ingress - (current.depth - previous.depth)
            out.write(
                ROW
                % (
                    int(ingress / seconds),
                    int(egress / seconds),
                    current.depth,
                    current.memory_depth,
                    current.backend_depth,
                    current.in_flight_count,
                    current.deferred_count,
                    current.requeue_count,
                    current.timeout_count,
                    current.message_count,
                    current.client_count,
                )
            )
        out.flush()
        previous = current
        i += 1
        if count is None or count >= i:
            sleep(options.interval)


def main(argv: Sequence[str], command: str = "stat") -> int:
    flagset = stat_flagset()
    try:
        parsed = flagset.parse(argv)
    except HelpRequested as help_:
        sys.stderr.write(help_.usage)
        return 0
    except FlagError as exc:
        sys.stderr.write(f"trionsq {command}: {exc}\n")
        return 2
    values = flagset.defaults()
    values.update(parsed.values)
    options = StatOptions(**values)
    if options.version:
        print(app_version_string("nsq_stat"))
        return 0
    try:
        count = options.validate()
        poller = Poller(options)
        try:
            stat_loop(options, count, sys.stdout, poller)
        finally:
            poller.close()
    except StatError as err:
        sys.stderr.write(f"{err}\n")
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
