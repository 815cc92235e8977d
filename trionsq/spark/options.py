"""The ``nsq`` data source's options: parsing and validation of Spark's string options into
`SourceOptions` (streaming reads) and `SinkOptions` (batch and streaming writes).

No pyspark here: these run on the driver, in the reader process and in executors alike. Option
names are case-insensitive (Spark lower-cases them); durations are seconds (``"2.5"``) or
Go-style (``"500ms"``, ``"30s"``, ``"2m"``)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..client.connection import parse_address
from ..client.options import ConnectionOptions
from ..protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "NSQD_MAX_RDY",
    "S3_SCHEMES",
    "ClientSecurity",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "find_option",
    "local_path",
    "location_scheme",
    "parse_duration",
    "s3_parts",
    "staging_location",
]

#: nsqd's default ``--max-rdy-count``: the most one connection may have in flight.
NSQD_MAX_RDY = 2500

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*$")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class OptionError(ValueError):
    """An ``nsq`` data source option is missing or invalid."""


#: The URL schemes of the S3 staging store (``s3a`` is Hadoop's spelling of the same bucket).
S3_SCHEMES = ("s3", "s3a")

_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def local_path(location: str) -> str | None:
    """The local path `location` names: itself when it is a path (absolute or not), the path
    of a ``file:`` URL; None when it is a URL of another scheme (``s3:``, ``hdfs:``...)."""
    parts = urllib.parse.urlsplit(location)
    scheme = parts.scheme.lower()
    if not scheme:
        return location
    return parts.path if scheme == "file" else None


def location_scheme(location: str) -> str:
    """The lower-cased URL scheme of `location`, "" for a plain path."""
    return urllib.parse.urlsplit(location).scheme.lower()


def s3_parts(location: str, name: str = "option stagingLocation") -> tuple[str, str]:
    """(bucket, key prefix) of ``s3://bucket/prefix`` or ``s3a://bucket/prefix``; the prefix
    without leading, trailing or doubled slashes."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme.lower() not in S3_SCHEMES:
        raise OptionError(f"{name}: {location!r} is not an s3:// URL")
    if not parts.netloc:
        raise OptionError(f"{name}: {location!r} names no bucket: give s3://bucket/prefix")
    if not _BUCKET.match(parts.netloc) or parts.query or parts.fragment:
        raise OptionError(f"{name}: {location!r} is not s3://bucket/prefix")
    return parts.netloc, "/".join(p for p in parts.path.split("/") if p)


def staging_location(raw: str, name: str = "option stagingLocation") -> str:
    """The staged source's write-ahead log location, checked when the query starts: empty
    (the driver-side reader), an absolute path or ``file:`` URL (a directory the driver and
    every executor see as a POSIX file system: ``link``, ``fsync``), or ``s3://bucket/prefix``
    (``s3a://`` alike; conditional writes, through boto3). A relative path would be each
    executor's own, and a store of another scheme (``hdfs:``, ``gs:``...) is not served, so
    both are refused rather than staged on local disks."""
    if not raw:
        return ""
    scheme = location_scheme(raw)
    if scheme in S3_SCHEMES:
        s3_parts(raw, name)
        if importlib.util.find_spec("boto3") is None:
            raise OptionError(
                f"{name}: {raw!r}: the S3 staging store needs boto3 on the driver and every "
                "executor: pip install 'trionsq[spark-s3]'"
            )
        return raw
    path = local_path(raw)
    if path is None:
        raise OptionError(
            f"{name}: {raw!r} is on {scheme}: storage, which the staged source cannot use: it "
            "needs s3://bucket/prefix (object storage with conditional writes) or a directory "
            "the driver and every executor share as a POSIX file system (a shared mount, "
            "docs/spark.md); give such a location, or no stagingLocation for the driver-side "
            "reader"
        )
    if not os.path.isabs(path):
        raise OptionError(
            f"{name}: {raw!r} is a relative path, which each executor would resolve in its own "
            "working directory; give an absolute path on a mount every node shares"
        )
    return raw


def find_option(options: Mapping[str, str], name: str) -> str | None:
    """The value of option `name` in `options`, matched case-insensitively as Spark does."""
    for key, value in options.items():
        if key.lower() == name.lower():
            return value
    return None


def parse_duration(value: str, name: str) -> float:
    """Seconds from ``"2.5"``, ``"500ms"``, ``"30s"``, ``"2m"`` or ``"1h"``."""
    m = _DURATION.match(value)
    if not m:
        raise OptionError(f"option {name}: invalid duration {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


class _Reader:
    """Typed access to Spark's case-insensitive string options."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = {str(k).lower(): str(v) for k, v in options.items()}

    def text(self, name: str, default: str = "") -> str:
        return self.options.get(name.lower(), default).strip()

    def names(self, name: str) -> list[str]:
        return [part.strip() for part in self.text(name).split(",") if part.strip()]

    def int(self, name: str, default: int, minimum: int = 1) -> int:
        raw = self.text(name)
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise OptionError(f"option {name}: {raw!r} is not an integer") from None
        if value < minimum:
            raise OptionError(f"option {name}: {value} is below {minimum}")
        return value

    def duration(self, name: str, default: float) -> float:
        raw = self.text(name)
        return parse_duration(raw, name) if raw else default

    def flag(self, name: str) -> bool:
        raw = self.text(name).lower()
        if raw in ("", "false", "0", "no", "off"):
            return False
        if raw in ("true", "1", "yes", "on"):
            return True
        raise OptionError(f"option {name}: {raw!r} is not true or false")


@dataclass(frozen=True)
class ClientSecurity:
    """TLS, compression and AUTH for every nsqd connection of the source or sink (options
    ``tls``, ``tlsCaFile``, ``tlsCertFile``, ``tlsKeyFile``, ``tlsServerHostname``,
    ``snappy``, ``deflate``, ``deflateLevel``, ``authSecret``)."""

    tls: bool = False
    tls_cafile: str | None = None
    tls_certfile: str | None = None
    tls_keyfile: str | None = None
    tls_server_hostname: str | None = None
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    auth_secret: str | None = None

    @classmethod
    def parse(cls, r: _Reader) -> ClientSecurity:
        snappy, deflate = r.flag("snappy"), r.flag("deflate")
        if snappy and deflate:
            raise OptionError("options snappy and deflate: choose one compression")
        cafile = r.text("tlsCaFile") or None
        certfile = r.text("tlsCertFile") or None
        keyfile = r.text("tlsKeyFile") or None
        if keyfile and not certfile:
            raise OptionError("option tlsKeyFile needs tlsCertFile")
        level = r.int("deflateLevel", 6)
        if level > 9:
            raise OptionError("option deflateLevel: 1..9")
        return cls(
            # A CA or client certificate implies TLS.
            tls=r.flag("tls") or bool(cafile or certfile),
            tls_cafile=cafile,
            tls_certfile=certfile,
            tls_keyfile=keyfile,
            tls_server_hostname=r.text("tlsServerHostname") or None,
            snappy=snappy,
            deflate=deflate,
            deflate_level=level,
            auth_secret=r.options.get("authsecret"),
        )

    def kwargs(self) -> dict[str, Any]:
        """`ConnectionOptions` keyword arguments."""
        return {
            "tls_v1": self.tls,
            "tls_cafile": self.tls_cafile,
            "tls_certfile": self.tls_certfile,
            "tls_keyfile": self.tls_keyfile,
            "tls_server_hostname": self.tls_server_hostname,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "auth_secret": self.auth_secret,
        }


def _addresses(reader: _Reader) -> tuple[list[str], list[str]]:
    nsqd = reader.names("nsqd")
    lookupd = reader.names("lookupd")
    for address in nsqd:
        try:
            parse_address(address)
        except ValueError:
            raise OptionError(f"option nsqd: {address!r} is not host:port") from None
    if not nsqd and not lookupd:
        raise OptionError("give option nsqd (nsqd TCP addresses) or lookupd (nsqlookupd HTTP)")
    return nsqd, lookupd


@dataclass(frozen=True)
class SourceOptions:
    """What ``spark.readStream.format("nsq")`` understands (see docs/spark.md)."""

    topic: str
    channel: str
    nsqd: tuple[str, ...]
    lookupd: tuple[str, ...]
    #: Most rows in one micro-batch (Spark's default read limit, ReadMaxRows).
    max_messages_per_batch: int = 10_000
    #: NSQ in-flight window per nsqd (the sum of RDY over its connections). Messages stay in
    #: flight until the batch holding them is committed, so one batch takes at most half of it.
    max_in_flight: int = 20_000
    #: Connections per nsqd (each may hold at most nsqd's --max-rdy-count in flight).
    connections_per_nsqd: int = 8
    #: IDENTIFY msg_timeout (seconds); unfinished messages are TOUCHed every half of it.
    msg_timeout: float = 60.0
    #: How often TOUCH is sent for every unfinished message (default msg_timeout / 2).
    touch_interval: float = 30.0
    #: How long lookupd is polled between discoveries.
    lookupd_poll_interval: float = 60.0
    #: Trigger.AvailableNow ends once every connection was quiet this long (or went past
    #: the moment the trigger started).
    available_now_idle: float = 2.0
    #: Input partitions per micro-batch (Spark tasks).
    num_partitions: int = 2
    heartbeat_interval: float = 30.0
    connect_timeout: float = 5.0
    #: Executor-side consumption: the write-ahead staging log's location (a path every
    #: executor and the driver see, or s3://bucket/prefix). Empty: the driver-side reader.
    staging_location: str = ""
    #: nsqd HTTP addresses, in the order of `nsqd` (for /stats depth); lookupd supplies its own.
    nsqd_http: tuple[str, ...] = ()
    #: A task stops reading once nothing arrived for this long (it has less than its share).
    read_idle_timeout: float = 0.25
    #: The longest a task reads before staging (kept well below msgTimeout).
    read_timeout: float = 10.0
    security: ClientSecurity = ClientSecurity()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        r = _Reader(options)
        topic, channel = r.text("topic"), r.text("channel")
        if not topic:
            raise OptionError("option topic is required")
        if not is_valid_topic_name(topic):
            raise OptionError(f"option topic: {topic!r} is not a valid NSQ topic name")
        if not channel:
            raise OptionError("option channel is required")
        if not is_valid_channel_name(channel):
            raise OptionError(f"option channel: {channel!r} is not a valid NSQ channel name")
        nsqd, lookupd = _addresses(r)
        per_batch = r.int("maxMessagesPerBatch", 10_000)
        in_flight = r.int("maxInFlight", 2 * per_batch)
        default_conns = max(1, math.ceil(in_flight / NSQD_MAX_RDY))
        conns = r.int("connectionsPerNsqd", default_conns)
        if in_flight < 2 * conns:
            raise OptionError(
                f"option maxInFlight: {in_flight} leaves connectionsPerNsqd={conns} "
                "connections less than 2 messages each"
            )
        msg_timeout = r.duration("msgTimeout", 60.0)
        if not 1.0 <= msg_timeout <= 900.0:
            raise OptionError("option msgTimeout: must be within 1s..15m (nsqd's range)")
        touch = r.duration("touchInterval", msg_timeout / 2)
        if not 0 < touch < msg_timeout:
            raise OptionError("option touchInterval: must be above 0 and below msgTimeout")
        nsqd_http = r.names("nsqdHttp")
        if nsqd_http and len(nsqd_http) != len(nsqd):
            raise OptionError("option nsqdHttp: one HTTP address per address of option nsqd")
        read_timeout = r.duration("readTimeout", min(10.0, msg_timeout / 3))
        if not 0 < read_timeout <= msg_timeout / 2:
            raise OptionError("option readTimeout: must be above 0 and at most msgTimeout / 2")
        return cls(
            topic=topic,
            channel=channel,
            nsqd=tuple(nsqd),
            lookupd=tuple(lookupd),
            max_messages_per_batch=per_batch,
            max_in_flight=in_flight,
            connections_per_nsqd=conns,
            msg_timeout=msg_timeout,
            touch_interval=touch,
            lookupd_poll_interval=r.duration("lookupdPollInterval", 60.0),
            available_now_idle=r.duration("availableNowIdleTimeout", 2.0),
            num_partitions=r.int("numPartitions", 2),
            heartbeat_interval=r.duration("heartbeatInterval", 30.0),
            connect_timeout=r.duration("connectTimeout", 5.0),
            staging_location=staging_location(r.text("stagingLocation")),
            nsqd_http=tuple(nsqd_http),
            read_idle_timeout=r.duration("readIdleTimeout", 0.25),
            read_timeout=read_timeout,
            security=ClientSecurity.parse(r),
        )

    def connection_options(self) -> ConnectionOptions:
        """The consumer connections' IDENTIFY, TLS, compression and AUTH settings."""
        return ConnectionOptions(
            msg_timeout=self.msg_timeout,
            heartbeat_interval=self.heartbeat_interval,
            connect_timeout=self.connect_timeout,
            user_agent="trionsq-spark",
            **self.security.kwargs(),
        )

    @property
    def rdy_per_connection(self) -> int:
        """The RDY each connection gets (nsqd caps it at its --max-rdy-count)."""
        return max(1, self.max_in_flight // self.connections_per_nsqd)


@dataclass(frozen=True)
class SinkOptions:
    """What ``df.write.format("nsq")`` / ``writeStream.format("nsq")`` understand."""

    nsqd: tuple[str, ...]
    lookupd: tuple[str, ...]
    #: The topic for every row; without it each row's ``topic`` column names its topic.
    topic: str = ""
    #: Most messages per MPUB.
    batch_size: int = 1000
    #: Most body bytes per MPUB (keep under nsqd's --max-body-size, 5 MiB by default).
    batch_bytes: int = 1024 * 1024
    #: MPUBs outstanding per connection.
    max_pipeline: int = 8
    connect_timeout: float = 5.0
    security: ClientSecurity = ClientSecurity()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        r = _Reader(options)
        nsqd, lookupd = _addresses(r)
        topic = r.text("topic")
        if topic and not is_valid_topic_name(topic):
            # The NSQ error nsqd would answer, raised before any task runs.
            raise OptionError(f'E_BAD_TOPIC topic name "{topic}" is not valid')
        return cls(
            nsqd=tuple(nsqd),
            lookupd=tuple(lookupd),
            topic=topic,
            batch_size=r.int("batchSize", 1000),
            batch_bytes=r.int("batchBytes", 1024 * 1024),
            max_pipeline=r.int("maxPipeline", 8),
            connect_timeout=r.duration("connectTimeout", 5.0),
            security=ClientSecurity.parse(r),
        )
