"""`trionsq to_file` (nsq_to_file): archive topics to newline-delimited files, optionally
gzipped and rotated, written in --work-dir and moved to --output-dir when closed.

As Go's: messages are FIN'd only after the file holding them is synced (every
--sync-interval, when max-in-flight messages are pending, or when the consumer is starved),
file names follow --filename-format (``<TOPIC> <HOST> <PID> <DATETIME> <REV>``), and topics
are the --topic list or those lookupd knows matching --topic-pattern (refreshed every
--topic-refresh). SIGHUP closes the files (new ones open on the next message); SIGINT/SIGTERM
syncs, closes and moves them, then exits.
"""

from __future__ import annotations

import datetime as dt
import gzip
import logging
import math
import os
import re
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import httpx
import trio

from trionsq import __version__
from trionsq.client import ClientError, Consumer, Message
from trionsq.options import BOOL, DURATION, INT, STRING, Flag, FlagSet

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
class ToFileOptions:
    version: bool = False
    log_level: str = "info"
    log_prefix: str = "[nsq_to_file] "
    channel: str = "nsq_to_file"
    max_in_flight: int = 200
    output_dir: str = "/tmp"
    work_dir: str = ""
    datetime_format: str = "%Y-%m-%d_%H"
    filename_format: str = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
    host_identifier: str = ""
    gzip_level: int = 6
    gzip: bool = False
    skip_empty_files: bool = False
    topic_refresh: float = 60.0
    topic_pattern: str = ""
    rotate_size: int = 0
    rotate_interval: float = 0.0
    sync_interval: float = 30.0
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    nsqd_tcp_addresses: list[str] = field(default_factory=list)
    lookupd_http_addresses: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    consumer_opts: list[str] = field(default_factory=list)
    consumer_options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Go's startup checks, in its order."""
        if not self.channel:
            raise AppError("--channel is required")
        if self.http_client_connect_timeout <= 0:
            raise AppError("--http-client-connect-timeout should be positive")
        if self.http_client_request_timeout <= 0:
            raise AppError("--http-client-request-timeout should be positive")
        check_sources(self.nsqd_tcp_addresses, self.lookupd_http_addresses)
        if self.gzip_level < 1 or self.gzip_level > 9:
            raise AppError(f"invalid --gzip-level value ({self.gzip_level}), should be 1-9")
        if not self.topics and not self.topic_pattern:
            raise AppError("--topic or --topic-pattern required")
        if not self.topics and not self.lookupd_http_addresses:
            raise AppError("--lookupd-http-address must be specified when no --topic specified")
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise AppError(f"--topic-pattern is invalid: {exc}") from None
        if self.sync_interval <= 0:
            raise AppError("--sync-interval should be positive")
        check_names(self.topics, self.channel)
        if not self.work_dir:
            self.work_dir = self.output_dir
        self.consumer_options = config_options(self.consumer_opts)
        compute_filename_format(self, "topic")  # the <REV> check


def to_file_flagset() -> FlagSet:
    def f(name: str, kind: str, default: Any, help_: str) -> Flag:
        return Flag(name, kind, default, help_, cfg=None)

    return FlagSet(
        "nsq_to_file",
        [
            version_flag(),
            f("log-level", STRING, "info", "set log verbosity: debug, info, warn, error, or fatal"),
            f("log-prefix", STRING, "[nsq_to_file] ", "log message prefix"),
            f("channel", STRING, "nsq_to_file", "nsq channel"),
            f("max-in-flight", INT, 200, "max number of messages to allow in flight"),
            f("output-dir", STRING, "/tmp", "directory to write output files to"),
            f(
                "work-dir",
                STRING,
                "",
                "directory for in-progress files before moving to output-dir",
            ),
            f(
                "datetime-format",
                STRING,
                "%Y-%m-%d_%H",
                "strftime compatible format for <DATETIME> in filename format",
            ),
            f(
                "filename-format",
                STRING,
                "<TOPIC>.<HOST><REV>.<DATETIME>.log",
                "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are "
                "replaced. <REV> is increased when file already exists)",
            ),
            f(
                "host-identifier",
                STRING,
                "",
                "value to output in log filename in place of hostname. <SHORT_HOST> and "
                "<HOSTNAME> are valid replacement tokens",
            ),
            f(
                "gzip-level",
                INT,
                6,
                "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)",
            ),
            f("gzip", BOOL, False, "gzip output files."),
            f("skip-empty-files", BOOL, False, "skip writing empty files"),
            f(
                "topic-refresh",
                DURATION,
                60.0,
                "how frequently the topic list should be refreshed",
            ),
            f("topic-pattern", STRING, "", "only log topics matching the following pattern"),
            Flag(
                "rotate-size",
                INT,
                0,
                "rotate the file when it grows bigger than `rotate-size` bytes",
                cfg=None,
            ),
            f("rotate-interval", DURATION, 0.0, "rotate the file every duration"),
            f("sync-interval", DURATION, 30.0, "sync file to disk every duration"),
            f("http-client-connect-timeout", DURATION, 2.0, "timeout for HTTP connect"),
            f("http-client-request-timeout", DURATION, 5.0, "timeout for HTTP request"),
            *source_flags(),
            repeatable("topic", "nsq topic (may be given multiple times)", "topics"),
            consumer_opt_flag(),
        ],
    )


def build_options(values: dict[str, Any]) -> ToFileOptions:
    options = ToFileOptions(**values)
    options.validate()
    return options


# -- file names -------------------------------------------------------------------------

#: The strftime directives nsq_to_file understands (go-strftime's table); others stay as is.
_STRFTIME = set("BbmAadHIMSYypZz%")


def strftime(fmt: str, when: dt.datetime) -> str:
    """go-strftime: ``%B %b %m %A %a %d %H %I %M %S %Y %y %p %Z %z %%``; anything else is
    copied literally (including unknown ``%x`` pairs)."""
    out = []
    i = 0
    n = len(fmt)
    while i < n:
        c = fmt[i]
        if c == "%" and i + 1 < n and fmt[i + 1] in _STRFTIME:
            code = fmt[i + 1]
            if code == "Z":
                out.append(when.tzname() or "UTC")
            else:
                out.append(when.strftime("%" + code))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def compute_filename_format(
    options: ToFileOptions,
    topic: str,
    hostname: str | None = None,
    pid: int | None = None,
) -> str:
    """The per-topic filename template (``<DATETIME>`` and ``<REV>`` still in it, or ``<REV>``
    removed when nothing needs revisions), as Go's computeFilenameFormat."""
    hostname = socket.gethostname() if hostname is None else hostname
    short = hostname.split(".")[0]
    identifier = short
    if options.host_identifier:
        identifier = options.host_identifier.replace("<SHORT_HOST>", short)
        identifier = identifier.replace("<HOSTNAME>", hostname)
    cff = options.filename_format
    work_dir = options.work_dir or options.output_dir
    if (
        options.gzip
        or options.rotate_size > 0
        or options.rotate_interval > 0
        or work_dir != options.output_dir
    ):
        if "<REV>" not in cff:
            raise AppError(
                "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
            )
    else:
        cff = cff.replace("<REV>", "")
    cff = cff.replace("<TOPIC>", topic)
    cff = cff.replace("<HOST>", identifier)
    cff = cff.replace("<PID>", str(os.getpid() if pid is None else pid))
    if options.gzip and not cff.endswith(".gz"):
        cff += ".gz"
    return cff


def rev_name(template: str, rev: int) -> str:
    return template.replace("<REV>", f"-{rev:06d}")


def rotation_reason(
    *,
    is_open: bool,
    filename: str,
    current_filename: str,
    rotate_interval: float,
    opened_for: float,
    rotate_size: int,
    filesize: int,
) -> str | None:
    """Why the file must be rotated now (None: keep it), in Go's order: no file open, a new
    <DATETIME> name, --rotate-interval elapsed, --rotate-size exceeded."""
    if not is_open:
        return "no file open"
    if current_filename != filename:
        return f"new filename {current_filename}"
    if rotate_interval > 0 and opened_for > rotate_interval:
        return f"{opened_for:.3f}s since last open"
    if rotate_size > 0 and filesize > rotate_size:
        return f"{filesize} bytes (> {rotate_size})"
    return None


def is_starved(consumer: Consumer) -> bool:
    """go-nsq's IsStarved: some connection has >= 85% of its RDY count in flight."""
    for conn in list(consumer.connections.values()):
        if conn.in_flight > 0 and conn.in_flight >= int(conn.rdy * 0.85):
            return True
    return False


def _exclusive_rename(src: str, dst: str) -> None:
    os.link(src, dst)  # FileExistsError when dst exists
    os.remove(src)


# -- one topic --------------------------------------------------------------------------


class FileLogger:
    """One topic's consumer and output file."""

    def __init__(
        self, options: ToFileOptions, topic: str, progress: Progress | None = None
    ) -> None:
        self.options = options
        self.topic = topic
        self.filename_format = compute_filename_format(options, topic)
        self.progress = progress or Progress([])
        self.consumer: Consumer | None = None
        self.out: IO[bytes] | None = None
        self.out_path = ""
        self.writer: Any = None
        self.gzip_writer: gzip.GzipFile | None = None
        self.filename = ""
        self.open_time = 0.0
        self.filesize = 0
        self.rev = 0
        self.terminating = False
        self._hup = False
        self._term = trio.Event()
        self._wait_scope: trio.CancelScope | None = None
        self._label = f"[{topic}/{options.channel}]"

    # -- control, from other tasks --

    def terminate(self) -> None:
        self._term.set()

    def hup(self) -> None:
        self._hup = True
        self._wake()

    def _wake(self) -> None:
        if self._wait_scope is not None:
            self._wait_scope.cancel()

    # -- files --

    def current_filename(self) -> str:
        when = dt.datetime.now().astimezone()
        return self.filename_format.replace(
            "<DATETIME>", strftime(self.options.datetime_format, when)
        )

    def needs_rotation(self) -> bool:
        reason = rotation_reason(
            is_open=self.out is not None,
            filename=self.filename,
            current_filename=self.current_filename(),
            rotate_interval=self.options.rotate_interval,
            opened_for=time.monotonic() - self.open_time,
            rotate_size=self.options.rotate_size,
            filesize=self.filesize,
        )
        if reason is not None and self.out is not None:
            log.info("%s %s: rotating...", self._label, reason)
        return reason is not None

    def update_file(self) -> None:
        """Close the current file and open the next one (Go's updateFile)."""
        self.close_file()
        opts = self.options
        filename = self.current_filename()
        if filename != self.filename:
            self.rev = 0
        else:
            self.rev += 1
        self.filename = filename
        self.open_time = time.monotonic()
        exclusive = opts.gzip or opts.rotate_interval > 0
        while True:
            rel = rev_name(filename, self.rev)
            path = os.path.join(opts.work_dir, rel)
            os.makedirs(os.path.dirname(path) or ".", mode=0o770, exist_ok=True)
            if opts.work_dir != opts.output_dir:
                out_name = os.path.join(opts.output_dir, rel)
                os.makedirs(os.path.dirname(out_name) or ".", mode=0o770, exist_ok=True)
                if os.path.exists(out_name):
                    log.warning("%s output file already exists: %s", self._label, out_name)
                    self.rev += 1
                    continue
            flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_APPEND)
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                log.warning("%s working file already exists: %s", self._label, path)
                self.rev += 1
                continue
            except OSError as exc:
                raise AppError(f"{self._label} unable to open {path}: {exc}") from None
            self.out = os.fdopen(fd, "ab" if not exclusive else "wb")
            self.out_path = path
            log.info("%s opening %s", self._label, path)
            self.filesize = os.fstat(fd).st_size
            if opts.rotate_size > 0 and self.filesize > opts.rotate_size:
                log.info("%s %s currently %d bytes, rotating...", self._label, path, self.filesize)
                self.out.close()
                self.out = None
                self.rev += 1
                continue
            break
        self._new_writer()

    def _new_writer(self) -> None:
        assert self.out is not None
        if self.options.gzip:
            self.gzip_writer = gzip.GzipFile(
                filename="", mode="wb", compresslevel=self.options.gzip_level, fileobj=self.out
            )
            self.writer = self.gzip_writer
        else:
            self.gzip_writer = None
            self.writer = self.out

    def write(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)
        self.filesize += len(data)

    def sync(self) -> None:
        """Flush to disk; with gzip, end the gzip member and start a new one (the file is a
        concatenation of members, each one's trailer vouching for the messages FIN'd)."""
        assert self.out is not None
        if self.gzip_writer is not None:
            self.gzip_writer.close()
            self.out.flush()
            os.fsync(self.out.fileno())
            self._new_writer()
        else:
            self.out.flush()
            os.fsync(self.out.fileno())

    def close_file(self) -> None:
        """Finish, sync and close the file; move it from the work dir to the output dir
        without overwriting anything (bumping <REV> on conflict)."""
        if self.out is None:
            return
        opts = self.options
        if self.gzip_writer is not None:
            self.gzip_writer.close()
            self.gzip_writer = None
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()
        self.out = None
        self.writer = None
        self.progress.add("files")
        if opts.work_dir == opts.output_dir:
            return
        src = self.out_path
        rel = os.path.relpath(src, opts.work_dir)
        dst = os.path.join(opts.output_dir, rel)
        log.info("%s moving finished file %s to %s", self._label, src, dst)
        try:
            _exclusive_rename(src, dst)
            return
        except FileExistsError:
            pass
        except OSError as exc:
            raise AppError(
                f"{self._label} unable to move file from {src} to {dst}: {exc}"
            ) from None
        template = os.path.join(os.path.dirname(dst), os.path.basename(self.filename))
        rev = self.rev + 1
        while True:
            log.warning("%s destination file already exists: %s", self._label, dst)
            dst = rev_name(template, rev)
            try:
                _exclusive_rename(src, dst)
            except FileExistsError:
                rev += 1
                continue
            except OSError as exc:
                raise AppError(
                    f"{self._label} unable to rename file from {src} to {dst}: {exc}"
                ) from None
            log.info("%s renamed finished file %s to %s to avoid overwrite", self._label, src, dst)
            return

    # -- running --

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        opts = self.options
        kwargs = dict(opts.consumer_options)
        kwargs.setdefault("user_agent", f"nsq_to_file/{__version__} trionsq")
        kwargs["max_in_flight"] = opts.max_in_flight
        consumer = Consumer(
            self.topic,
            opts.channel,
            nsqd_tcp_addresses=opts.nsqd_tcp_addresses,
            lookupd_http_addresses=opts.lookupd_http_addresses,
            **kwargs,
        )
        self.consumer = consumer
        async with consumer:
            send, receive = trio.open_memory_channel[Message](1)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, consumer, send)
                nursery.start_soon(self._router, receive)
                task_status.started()
                await self._term.wait()
                self.terminating = True
                self._wake()
                await consumer.close()

    @staticmethod
    async def _pump(consumer: Consumer, send: trio.MemorySendChannel[Message]) -> None:
        async with send:
            async for message in consumer:
                await send.send(message)

    async def _router(self, receive: trio.MemoryReceiveChannel[Message]) -> None:
        """Go's router loop: write each message, FIN the written ones after each sync."""
        opts = self.options
        pending: list[Message] = []
        next_tick = trio.current_time() + opts.sync_interval
        try:
            while True:
                sync = close_file = exit_ = False
                message: Message | None = None
                deadline = math.inf if self.terminating else next_tick
                with trio.CancelScope(deadline=deadline) as scope:
                    self._wait_scope = scope
                    try:
                        message = await receive.receive()
                    except trio.EndOfChannel:
                        exit_ = True
                self._wait_scope = None
                if exit_:
                    sync = close_file = True
                elif message is not None:
                    if self.needs_rotation():
                        self.update_file()
                        sync = True
                    self.write(message.body)
                    self.write(b"\n")
                    self.progress.add("messages")
                    pending.append(message)
                    if len(pending) >= opts.max_in_flight:
                        sync = True
                elif self._hup:
                    self._hup = False
                    sync = close_file = True
                elif self.terminating:
                    sync = True
                elif trio.current_time() >= next_tick:
                    next_tick = trio.current_time() + opts.sync_interval
                    if self.needs_rotation():
                        if opts.skip_empty_files:
                            close_file = True
                        else:
                            self.update_file()
                    sync = True
                if self.terminating:
                    sync = True
                assert self.consumer is not None
                if (sync or is_starved(self.consumer)) and pending:
                    log.debug("%s syncing %d records to disk", self._label, len(pending))
                    self.sync()
                    for m in pending:
                        m.finish()
                    pending.clear()
                if close_file:
                    self.close_file()
                if exit_:
                    return
        finally:
            with trio.CancelScope(shield=True):
                if pending and self.out is not None:
                    self.sync()
                    for m in pending:
                        m.finish()
                self.close_file()


# -- topics -----------------------------------------------------------------------------


async def lookupd_topics(options: ToFileOptions) -> list[str]:
    """Every topic the lookupds know (union; a failing lookupd is logged and skipped)."""
    timeout = httpx.Timeout(
        options.http_client_request_timeout, connect=options.http_client_connect_timeout
    )
    found: dict[str, None] = {}
    async with httpx.AsyncClient(
        timeout=timeout, headers={"Accept": "application/vnd.nsq; version=1.0"}
    ) as client:
        for address in options.lookupd_http_addresses:
            url = address if address.startswith("http") else f"http://{address}"
            try:
                response = await client.get(f"{url}/topics")
                response.raise_for_status()
                data = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                log.error("could not retrieve topic list from %s: %s", address, exc)
                continue
            for topic in data.get("topics") or []:
                found[topic] = None
    return list(found)


def topic_allowed(pattern: str, topic: str) -> bool:
    """Go's regexp.MatchString: the pattern found anywhere in the name."""
    if not pattern:
        return True
    try:
        return re.search(pattern, topic) is not None
    except re.error:
        return False


class TopicDiscoverer:
    """Runs a `FileLogger` per topic: the --topic list, or lookupd's topics matching
    --topic-pattern, refreshed every --topic-refresh."""

    def __init__(self, options: ToFileOptions, progress: Progress) -> None:
        self.options = options
        self.progress = progress
        self.loggers: dict[str, FileLogger] = {}

    async def update_topics(self, nursery: trio.Nursery, topics: Sequence[str]) -> None:
        for topic in topics:
            if topic in self.loggers:
                continue
            if not topic_allowed(self.options.topic_pattern, topic):
                log.warning(
                    "skipping topic %s (doesn't match pattern %s)",
                    topic,
                    self.options.topic_pattern,
                )
                continue
            try:
                logger = FileLogger(self.options, topic, self.progress)
            except (AppError, ValueError) as exc:
                log.error("couldn't create logger for new topic %s: %s", topic, exc)
                continue
            self.loggers[topic] = logger
            try:
                await nursery.start(logger.run)
            except ClientError as exc:  # nsqd unreachable: Go logs it and goes on
                del self.loggers[topic]
                log.error("couldn't create logger for new topic %s: %s", topic, exc)

    async def run(self) -> None:
        opts = self.options
        async with trio.open_nursery() as loggers:
            async with trio.open_nursery() as control:
                control.start_soon(self.progress.run)
                control.start_soon(self._hup_loop)
                if opts.topics:
                    await self.update_topics(loggers, opts.topics)
                else:
                    control.start_soon(self._refresh_loop, loggers)
                await wait_for_signal()
                control.cancel_scope.cancel()
            for logger in self.loggers.values():
                logger.terminate()

    async def _refresh_loop(self, loggers: trio.Nursery) -> None:
        while True:
            await self.update_topics(loggers, await lookupd_topics(self.options))
            await trio.sleep(self.options.topic_refresh)

    async def _hup_loop(self) -> None:
        with trio.open_signal_receiver(signal.SIGHUP) as signals:
            async for _ in signals:
                for logger in self.loggers.values():
                    logger.hup()


async def run(options: ToFileOptions) -> int:
    progress = Progress(["messages", "files"])
    await TopicDiscoverer(options, progress).run()
    return 0


def main(argv: Sequence[str], command: str = "to_file") -> int:
    return cli(
        command,
        "nsq_to_file",
        to_file_flagset(),
        argv,
        build_options,
        run,
        log_level=lambda o: o.log_level,
        log_prefix=lambda o: o.log_prefix,
    )
