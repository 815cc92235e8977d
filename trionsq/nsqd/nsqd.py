"""`NSQD`: the daemon's state (topics, clients) and its nursery tree.

```
NSQD.run()  root nursery
 ├─ client nursery: TCP listener, one task per connection (its command loop), a message
 │                  pump per subscribed connection, the heartbeats of the others (one
 │                  task, heartbeats.py), and the HTTP and HTTPS servers (hypercorn)
 ├─ each topic's message pump
 ├─ queue scan loop (in-flight timeouts, deferred messages)
 ├─ one lookup peer per nsqlookupd (REGISTER/UNREGISTER, PING)
 ├─ disk syncer (fsync and disk-queue metadata, in a worker thread)
 ├─ nsqd.dat writer
 ├─ memory trimmer (after connections close: gc and malloc_trim, see memory_trim.py)
 └─ statsd loop (with --statsd-address)
```
At start, nsqd.dat's topics and channels are created, their disk queues recovered first in a
worker thread (a corrupt or huge queue never stalls the event loop), then nsqd serves.
Shutdown is one ordered path (`request_exit`): stop accepting and close every connection
(their in-flight messages stay with their channels), then close every topic, which writes each
channel's queued, in-flight and deferred messages to its disk queue, then the final sync of
every disk queue and nsqd.dat, then stop the pumps.
"""

from __future__ import annotations

import errno
import functools
import logging
import math
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from .. import NSQ_VERSION
from ..daemon import StartupError, start_http
from ..diskqueue import DiskSyncer
from ..diskqueue.fs import LOCAL, FileSystem
from ..diskqueue.recovery import Recovered
from ..diskqueue.syncer import BlockingRunner
from ..goerrors import errno_text, os_error_text
from ..protocol.guid import GUIDFactory
from ..protocol.lookup_v1 import register, unregister
from ..protocol.names import is_ephemeral
from ..protocol.negotiation import IdentifyLimits
from . import metadata
from .backend import Backend, DiscardBackend, DiskBackend, recover_queues
from .bounds import LimitOverride
from .client_v2 import ClientV2
from .dead_letter_names import DeadLetterNames
from .heartbeats import Heartbeats
from .http_api import serve_http
from .lookup import LookupPeers
from .memory_trim import MemoryTrimmer
from .opening import Opened, open_nsqd
from .options import NSQDOptions
from .protocol_v2 import handle_connection
from .stats import snapshot
from .statsd import statsd_loop
from .topic import Topic
from .wakeup import Wakeup

if TYPE_CHECKING:
    from .seam import ReplicationLayer

log = logging.getLogger("trionsq.nsqd")

#: accept() failures that mean "out of file descriptors or memory": retried after a pause
#: (as trio.serve_listeners does), any other ends the listener.
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_ACCEPT_RETRY = 0.1


class NSQD:
    def __init__(
        self,
        options: NSQDOptions,
        run_blocking: BlockingRunner = trio.to_thread.run_sync,
        fs: FileSystem = LOCAL,
        opened: Opened | None = None,
        replication: Callable[[NSQD], ReplicationLayer] | None = None,
    ) -> None:
        """`run_blocking` runs disk syncs, queue recovery, nsqd.dat writes and peeks at disk
        queues (a worker thread; tests on a MockClock pass an inline runner, so the clock does
        not jump while a thread works). `fs`: the file system under the data path (tests
        simulate a disk). `opened`: the locked data path and listening sockets, when the
        program opened them before it imported the daemon (opening.py). `replication`: the
        layer of replicated topics, made for this nsqd (required with --replicate-to; the
        program picks it: assembly.py)."""
        self.options = options
        self.fs = fs
        self._opened = opened
        #: Message IDs for every topic: one generator, so that IDs are unique and increasing
        #: whichever path (TCP, HTTP) made them (Go has one per topic, equally unique).
        self.guid = GUIDFactory(options.node_id)
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, ClientV2] = {}
        self.producers: dict[int, ClientV2] = {}
        self.start_time = int(time.time())
        self.identify_limits = IdentifyLimits(
            version=NSQ_VERSION,
            client_timeout_ms=int(options.client_timeout * 1000),
            max_heartbeat_interval_ms=int(options.max_heartbeat_interval * 1000),
            output_buffer_timeout_ms=int(options.output_buffer_timeout * 1000),
            min_output_buffer_timeout_ms=int(options.min_output_buffer_timeout * 1000),
            max_output_buffer_timeout_ms=int(options.max_output_buffer_timeout * 1000),
            max_output_buffer_size=options.max_output_buffer_size,
            msg_timeout_ms=int(options.msg_timeout * 1000),
            max_msg_timeout_ms=int(options.max_msg_timeout * 1000),
            max_rdy_count=options.max_rdy_count,
            max_deflate_level=options.max_deflate_level,
            # TLS needs the certificate and key (an unusable pair stops nsqd at startup).
            tls_available=bool(options.tls_cert and options.tls_key),
            snappy_available=options.snappy,
            deflate_available=options.deflate,
            auth_required=bool(options.auth_http_addresses),
        )
        self.tcp_address: tuple[str, int] | str | None = None
        self.http_address: tuple[str, int] | None = None
        self.https_address: tuple[str, int] | None = None
        #: The TLS context of TCP upgrades and HTTPS (None without --tls-cert/--tls-key).
        self.tls_context: ssl.SSLContext | None = None
        # "OK", or "NOK - <why>" when nsqd cannot do its job (e.g. its disk fails).
        self.health = "OK"
        #: What the ordered shutdown failed to keep (main.py exits 1 when there is any).
        self.exit_errors: list[str] = []
        self._next_client_id = 0
        self._nursery: trio.Nursery | None = None
        self._clients_nursery: trio.Nursery | None = None
        self._exit = trio.Event()
        self._exited = trio.Event()
        self._scan_wake = Wakeup()
        self._scan_target = math.inf
        self.run_blocking = run_blocking
        self.disk_syncer = DiskSyncer(options.sync_timeout, run_blocking, sync_ack=options.sync_ack)
        #: The data path (--data-path, else the working directory, as Go's).
        self.data_path = options.data_path or os.getcwd()
        self.metadata = metadata.MetadataWriter(
            metadata.metadata_path(self.data_path),
            lambda: metadata.current(self),
            lambda name: metadata.current_topic(self, name),
            run_blocking,
            fs=fs,
        )
        # What start-up recovery found for the queues of nsqd.dat, until they are opened.
        self._recovered: dict[str, Recovered] = {}
        self._loading = False
        self.lookup = LookupPeers(self)
        #: Heartbeats of the connections that have no message pump (heartbeats.py).
        self.heartbeats = Heartbeats()
        #: While a task delivers and then sends the messages itself (`protocol_v2._pump`):
        #: the clients given messages, instead of waking their message pumps.
        self.sending_now: list[ClientV2] | None = None
        self.memory_trimmer = MemoryTrimmer(run_blocking)
        #: --dead-letter-topic, compiled (dead_letter.py).
        self.dead_letter_names = DeadLetterNames(options.dead_letter_topic)
        #: Replicated topics (seam.py): None unless --replicate-to is given.
        self.replication: ReplicationLayer | None = None
        if options.replicate_to:
            if replication is None:
                raise ValueError("--replicate-to needs the replication layer (assembly.new_nsqd)")
            self.replication = replication(self)
        #: PUB's OK waits (acks.py): --sync-ack, or replication on.
        self.hold_acks = options.sync_ack or self.replication is not None

    # -- topics ---------------------------------------------------------------------------

    def make_backend(self, name: str, ephemeral: bool, *, channel: bool) -> Backend:
        """The disk queue named as Go nsqd names it (``topic`` or ``topic:channel``); a
        channel's tracks consumption, so a crash redelivers its in-flight messages."""
        if ephemeral:
            return DiscardBackend()
        recovered = self._recovered.pop(name, None)
        return DiskBackend(self, name, track_consumption=channel, recovered=recovered)

    def mem_limit(self, ephemeral: bool) -> int:
        """Messages a topic or channel keeps in memory: --mem-queue-size, or none with
        --sync-ack (every durable message goes through the disk)."""
        if self.options.sync_ack and not ephemeral:
            return 0
        return self.options.mem_queue_size

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            ephemeral = is_ephemeral(name)
            backend = self.make_backend(name, ephemeral, channel=False)
            replication = self.replication
            if replication is not None and replication.replicates(name):
                topic = replication.new_topic(name, backend)
            else:
                topic = Topic(self, name, backend)
            self.topics[name] = topic
            log.info("TOPIC(%s): created", name)
            nursery = self._nursery
            assert nursery is not None
            for task, task_name in topic.tasks():
                nursery.start_soon(task, name=task_name)
            if not ephemeral:
                self.persist_metadata(name)
            self.lookup.notify(register(name))
            if not self._loading:
                self._precreate_channels(topic)
        return topic

    def _precreate_channels(self, topic: Topic) -> None:
        """NSQ's guard against losing a new topic's first messages: when lookupds are
        connected, ask them for the topic's channels and create those before the topic's
        pump delivers anything (the topic accepts messages meanwhile)."""
        if self.lookup.http_addresses:
            topic.started = False
            assert self._nursery is not None
            self._nursery.start_soon(self._start_after_lookup, topic)
        elif self.options.nsqlookupd_tcp_addresses:
            log.error(
                "no available nsqlookupd to query for channels to pre-create for topic %s",
                topic.name,
            )

    async def _start_after_lookup(self, topic: Topic) -> None:
        try:
            names = await self.lookup.channels_for(topic.name)
            if not topic.exiting:
                for name in names:
                    topic.get_channel(name)
        finally:
            topic.start()

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            log.info("TOPIC(%s): deleting", name)
            self.lookup.notify(unregister(name))
            topic.delete()
            topic.wake.set()
            if not topic.ephemeral:
                self.persist_metadata(name)

    def persist_metadata(self, topic: str | None = None) -> None:
        """Topic `topic` (None: any), its channels or their paused states changed: rewrite
        nsqd.dat soon (not while loading it)."""
        if not self._loading:
            self.metadata.request(topic)

    def _load_metadata(self, topics: list[metadata.TopicMetadata]) -> None:
        self._loading = True
        if self.replication is not None:
            epochs = {t.name: t.replication for t in topics if t.replication is not None}
            self.replication.load_started(epochs)
        try:
            for entry in topics:
                topic = self.get_topic(entry.name)
                if entry.limits:
                    topic.set_limits(LimitOverride.from_json(entry.limits))
                if entry.delivery_limits is not None:
                    topic.set_delivery_limits(entry.delivery_limits)
                for channel_entry in entry.channels:
                    channel = topic.get_channel(channel_entry.name)
                    if channel_entry.limits:
                        channel.set_limits(LimitOverride.from_json(channel_entry.limits))
                    if channel_entry.delivery_limits is not None:
                        channel.set_delivery_limits(channel_entry.delivery_limits)
                    if channel_entry.paused:
                        channel.pause()
                if entry.paused:
                    topic.pause()
        finally:
            self._loading = False
            if self.replication is not None:
                self.replication.load_finished()

    # -- clients --------------------------------------------------------------------------

    def new_client(self, stream: trio.abc.Stream, remote: str) -> ClientV2:
        self._next_client_id += 1
        client = ClientV2(self, self._next_client_id, stream, remote)
        self.clients[client.id] = client
        return client

    def remove_client(self, client: ClientV2) -> None:
        self.clients.pop(client.id, None)
        self.producers.pop(client.id, None)

    # -- the queue scan loop --------------------------------------------------------------

    def scan_notify(self, deadline: float) -> None:
        """A deadline was set; wake the scan loop if it sleeps past it."""
        if deadline < self._scan_target:
            self._scan_target = deadline
            self._scan_wake.set()

    async def _queue_scan_loop(self) -> None:
        """Sleep until the earliest in-flight deadline or deferred due time of any channel,
        then requeue what is due. An idle daemon does no work."""
        while True:
            now = trio.current_time()
            target = math.inf
            for topic in list(self.topics.values()):
                for channel in list(topic.channels.values()):
                    deadline = channel.process_due(now)
                    if deadline < target:
                        target = deadline
            self._scan_target = target
            with trio.move_on_at(target):
                await self._scan_wake.wait()

    # -- running --------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until `request_exit`, then shut down in order."""
        # The data path locked and checked, the sockets listening (opening.py): as a program
        # nsqd does that before it imports this module; in process, now.
        opened = self._opened or open_nsqd(self.options, self.fs, self.data_path)
        self._opened = None
        try:
            await self._serve(opened, task_status)
        finally:
            opened.close_sockets()  # those not adopted (a start-up failure)
            self.fs.unlock_dir(opened.lock_handle)
            self._exited.set()

    async def _serve(self, opened: Opened, task_status: Any) -> None:
        """Start, serve, and run the ordered shutdown (the data path is locked)."""
        self.tls_context = opened.tls_context
        saved_topics = self._load_saved_topics()
        if self.options.sync_ack:
            log.info("NSQ: --sync-ack: publishes are answered once fsynced")
        if self.options.max_queue_depth or self.options.max_queue_bytes:
            log.info(
                "NSQ: bounded queues: max depth %d, max bytes %d, when full: %s",
                self.options.max_queue_depth,
                self.options.max_queue_bytes,
                self.options.queue_full_policy,
            )
        self._recovered = await self.run_blocking(
            recover_queues, self, metadata.queue_names(saved_topics)
        )
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in opened.tcp]
        opened.tcp = []
        self.tcp_address = _listener_address(listeners[0])
        log.info("TCP: listening on %s", _format_address(self.tcp_address))
        async with trio.open_nursery() as root:
            self._nursery = root
            root.start_soon(self._queue_scan_loop, name="queue-scan")
            await root.start(self.disk_syncer.run, name="disk-syncer")
            self._load_metadata(saved_topics)
            await self.metadata.write()
            if self.metadata.error is not None:
                err = os_error_text(self.metadata.error)
                raise StartupError(f"failed to persist metadata - {err}")
            await root.start(self.metadata.run, name="metadata-writer")
            await root.start(self.memory_trimmer.run, name="memory-trimmer")
            async with trio.open_nursery() as clients:
                self._clients_nursery = clients
                await clients.start(self.heartbeats.run, name="heartbeats")
                for listener in listeners:
                    clients.start_soon(self._accept, listener, clients, name="tcp-listener")
                if opened.http is not None:
                    self.http_address = await self._start_http(clients, opened.adopt_http())
                if opened.https is not None:  # opened only with a TLS context
                    fd = opened.adopt_http(tls=True)
                    self.https_address = await self._start_http(clients, fd, tls=True)
                self.lookup.start(root, self.options.nsqlookupd_tcp_addresses)
                if self.replication is not None:
                    await root.start(self.replication.run, name="replication")
                if self.options.statsd_address:
                    http_port = self.http_address[1] if self.http_address else None
                    await root.start(
                        functools.partial(
                            statsd_loop, self.stats, self.options, http_port=http_port
                        ),
                        name="statsd",
                    )
                task_status.started(self)
                await self._exit.wait()
                clients.cancel_scope.cancel()
            self._log_servers_closed()
            # Go's order: nsqd.dat, then the topics (and nsqd.dat again if it changed since).
            # A rewrite that fails loses something only if the file lacked a change.
            unwritten = self.metadata.pending
            await self.metadata.write()
            self._close_topics()
            if not await self.disk_syncer.close():
                self.exit_errors.append("the final sync of the disk queues failed")
            if self.metadata.pending:
                unwritten = True
                await self.metadata.write()
            if unwritten and self.metadata.error is not None:
                self.exit_errors.append(
                    f"failed to persist metadata - {os_error_text(self.metadata.error)}"
                )
            log.info("NSQ: stopping subsystems")
            root.cancel_scope.cancel()
        # Go's queue scan and lookup loops (and statsd's) say so as they end.
        log.info("QUEUESCAN: closing")
        log.info("LOOKUP: closing")
        if self.options.statsd_address:
            log.info("STATSD: closing")
        log.info("NSQ: bye")

    def _log_servers_closed(self) -> None:
        """Go's TCP and HTTP(S) servers' last lines, once their connections are done."""
        log.info("TCP: closing %s", _format_address(self.tcp_address))
        if self.http_address is not None:
            log.info("HTTP: closing %s", _format_address(self.http_address))
        if self.https_address is not None:
            log.info("HTTPS: closing %s", _format_address(self.https_address))

    async def _start_http(
        self, nursery: trio.Nursery, fd: int, *, tls: bool = False
    ) -> tuple[str, int]:
        """The API on its listening socket `fd`: HTTP, or over TLS on --https-address (only
        with a certificate and key); the bound address."""
        address = await start_http(
            nursery,
            functools.partial(serve_http, self, tls=tls),
            self.options.https_address if tls else self.options.http_address,
            fd=fd,
        )
        log.info("%s: listening on %s", "HTTPS" if tls else "HTTP", _format_address(address))
        return address

    @property
    def auth_enabled(self) -> bool:
        return bool(self.options.auth_http_addresses)

    @property
    def broadcast_tcp_port(self) -> int:
        """The TCP port lookupd hands out: --broadcast-tcp-port, else the one listened on."""
        if self.options.broadcast_tcp_port:
            return self.options.broadcast_tcp_port
        return self.tcp_address[1] if isinstance(self.tcp_address, tuple) else 0

    @property
    def broadcast_http_port(self) -> int:
        if self.options.broadcast_http_port:
            return self.options.broadcast_http_port
        return self.http_address[1] if self.http_address else 0

    def stats(self) -> dict[str, Any]:
        """The stats snapshot statsd sends (every topic and channel, no clients)."""
        return snapshot(self, include_clients=False)

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Serve each connection `listener` accepts in its own task: trio.serve_listeners'
        loop, less the frame it keeps per connection (every byte counts, times 10,000 idle
        connections; `handle_connection` closes the stream)."""
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as err:
                    if err.errno not in _ACCEPT_CAPACITY_ERRNOS:
                        raise
                    log.warning(  # Go's words (it retries at once; this waits _ACCEPT_RETRY)
                        "temporary Accept() failure - accept tcp %s: accept4: %s",
                        _format_address(self.tcp_address),
                        errno_text(err),
                    )
                    await trio.sleep(_ACCEPT_RETRY)
                else:
                    nursery.start_soon(handle_connection, self, stream)

    def start_client_task(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run `fn(*args)` beside the connections (a client's message pump): shutdown
        cancels it with them."""
        assert self._clients_nursery is not None, "NSQD is not running"
        self._clients_nursery.start_soon(fn, *args)

    def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve an already connected stream as a client connection, in the client nursery
        (tests hand in in-memory streams; shutdown closes it like any connection)."""
        assert self._clients_nursery is not None, "NSQD is not running"
        self._clients_nursery.start_soon(handle_connection, self, stream)

    @property
    def exiting(self) -> bool:
        """The ordered shutdown has begun."""
        return self._exit.is_set()

    def request_exit(self) -> None:
        """Begin the ordered shutdown (idempotent)."""
        self._exit.set()

    async def wait_exited(self) -> None:
        await self._exited.wait()

    def _close_topics(self) -> None:
        log.info("NSQ: closing topics")
        lost = sum(topic.close() for topic in self.topics.values())
        if lost:
            why = f" ({self.health})" if self.health != "OK" else ""
            self.exit_errors.append(f"{lost} messages could not be saved{why}")

    # -- addresses and the data path ------------------------------------------------------

    def _load_saved_topics(self) -> list[metadata.TopicMetadata]:
        try:
            return metadata.load(self.fs, self.metadata.path)
        except metadata.MetadataError as err:
            raise StartupError(f"failed to load metadata - {err}") from err


def _listener_address(listener: trio.SocketListener) -> tuple[str, int] | str:
    name = listener.socket.getsockname()
    if isinstance(name, tuple):
        return name[0], name[1]
    return str(name)


def _format_address(address: tuple[str, int] | str | None) -> str:
    if isinstance(address, tuple):
        host, port = address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(address)
