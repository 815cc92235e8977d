"""nsqd's HTTP API (docs/protocol.md §4): a quart-trio app served by hypercorn inside nsqd's
nursery.

Routes, parameters, status codes and bodies are Go nsqd's: every response carries
``X-NSQ-Content-Type: nsq; version=1.0``; a string answers as text, a value as JSON, an error
as ``{"message": "<TEXT>"}`` with its status. Parameters come from the query string only, parsed
as Go's url.ParseQuery does (a malformed query is 400 INVALID_REQUEST). The plumbing shared with
the other daemons' APIs is `trionsq.http_common`.
"""

from __future__ import annotations

import functools
import logging
import re
import socket
import struct
from typing import TYPE_CHECKING, Any

import trio
from quart import Response, request
from quart_trio import QuartTrio

from .. import NSQ_VERSION
from ..http_common import (
    JSON_CONTENT_TYPE,
    NSQ_CONTENT_TYPE,
    HTTPError,
    access_logged,
    config_address_list,
    config_log_level,
    content_length,
    first,
    new_app,
    plain_text,
    read_body,
    serve_app,
    v1_route,
)
from ..http_common import query as _query
from ..logs import set_log_level
from ..options import GoParseError, parse_duration
from ..protocol.errors import ProtocolError
from ..protocol.names import is_valid_channel_name, is_valid_topic_name
from ..protocol.parser import CommandParser
from . import acks
from .backend import BackendError
from .bounds import BoundsError, LimitOverride, QueueFull, limits_json
from .dead_letter import Limits, describe_limits
from .dead_letter_names import MAX_ATTEMPTS_LIMIT
from .stats import format_text, snapshot
from .topic import Topic, TopicExiting

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")

BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}
#: /topic/config and /channel/config's parameters (bounded queues, beyond NSQ).
_LIMIT_PARAMS = ("max_depth", "max_bytes", "policy")
#: Their dead-lettering and TTL parameters (dead_letter.py).
_DELIVERY_PARAMS = ("max_attempts", "message_ttl")


# -- topic and channel lookups --------------------------------------------------------------


def topic_from_query(nsqd: NSQD, params: dict[str, list[str]]) -> Topic:
    """Go's getTopicFromQuery: the topic, created if need be."""
    name = first(params, "topic")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not is_valid_topic_name(name):
        raise HTTPError(400, "INVALID_TOPIC")
    return nsqd.get_topic(name)


def existing_topic_and_channel_name(nsqd: NSQD, params: dict[str, list[str]]) -> tuple[Topic, str]:
    """Go's getExistingTopicFromQuery (with GetTopicChannelArgs' checks and texts)."""
    topic_name = first(params, "topic")
    if topic_name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not is_valid_topic_name(topic_name):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    channel_name = first(params, "channel")
    if channel_name is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_channel_name(channel_name):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    topic = nsqd.topics.get(topic_name)
    if topic is None:
        raise HTTPError(404, "TOPIC_NOT_FOUND")
    return topic, channel_name


def existing_topic(nsqd: NSQD, params: dict[str, list[str]], validate: bool) -> Topic:
    name = first(params, "topic")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if validate and not is_valid_topic_name(name):
        raise HTTPError(400, "INVALID_TOPIC")
    topic = nsqd.topics.get(name)
    if topic is None:
        raise HTTPError(404, "TOPIC_NOT_FOUND")
    return topic


async def replicated_admin(topic: Topic, action: str, channel: str | None = None) -> bool:
    """An admin action on a replicated topic (`Topic.admin`, replication/admin.py): done by
    the primary with its members, forwarded to it from a replica; raises HTTPError with the
    answer if it is not 200. False for any other topic (and an ephemeral channel): the caller
    acts here."""
    answer = await topic.admin(action, channel)
    if answer is None:
        return False
    status, message = answer
    if status != 200:
        raise HTTPError(status, message or "INTERNAL_ERROR")
    return True


def query() -> dict[str, list[str]]:
    """The request's query parameters; a malformed query string is logged as Go's nsqd logs
    it (and answered 400 ``INVALID_REQUEST``)."""
    try:
        return _query()
    except HTTPError as err:
        log.error("failed to parse request params - %s", err.detail)
        raise


# -- the app --------------------------------------------------------------------------------


def create_app(nsqd: NSQD, *, tls_enabled: bool = False) -> QuartTrio:
    """The HTTP API of `nsqd` as a quart-trio app; `tls_enabled` for the HTTPS listener's."""
    app = new_app("trionsq.nsqd", log)
    opts = nsqd.options
    route = functools.partial(v1_route, app)

    if not tls_enabled and opts.tls_required == "true":

        @app.before_request
        async def tls_required() -> Response:
            # Go's ServeHTTP with --tls-required=true: every request over plain HTTP, whatever
            # its path or method, answers 403 with the HTTPS port (0 without an HTTPS
            # listener), in Go's own formatting. (tcp-https leaves plain HTTP open.)
            https = nsqd.https_address
            port = https[1] if https else 0
            return Response(
                f'{{"message": "TLS_REQUIRED", "https_port": {port}}}',
                status=403,
                headers={
                    NSQ_CONTENT_TYPE[0]: NSQ_CONTENT_TYPE[1],
                    "Content-Type": JSON_CONTENT_TYPE,
                },
            )

    @app.route("/ping", methods=["GET"])
    @access_logged(log)
    async def ping() -> Response:
        # Go answers /ping as PlainText, not V1: no X-NSQ-Content-Type header, and when
        # unhealthy the health text itself with status 500.
        health = nsqd.health
        status = 200 if health == "OK" else 500
        return plain_text(health, status)

    @route("/info", ["GET"])
    async def info() -> dict[str, Any]:
        tcp = nsqd.tcp_address
        http = nsqd.http_address
        return {
            "version": NSQ_VERSION,
            "broadcast_address": opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": http[1] if isinstance(http, tuple) else -1,
            "tcp_port": tcp[1] if isinstance(tcp, tuple) else -1,
            "start_time": nsqd.start_time,
            "max_heartbeat_interval": opts.go_value_by_cfg_key("max_heartbeat_interval"),
            "max_output_buffer_size": opts.max_output_buffer_size,
            "max_output_buffer_timeout": opts.go_value_by_cfg_key("max_output_buffer_timeout"),
            "max_deflate_level": opts.max_deflate_level,
            "topology_zone": "",
            "topology_region": "",
        }

    # Go logs no access line for /pub and /mpub (nor does anything per message here).
    @route("/pub", ["POST"], access_log=False)
    async def pub() -> str:
        if content_length() > opts.max_msg_size:
            raise HTTPError(413, "MSG_TOO_BIG")
        body = await read_body(opts.max_msg_size)
        if body is None:
            raise HTTPError(413, "MSG_TOO_BIG")
        if not body:
            raise HTTPError(400, "MSG_EMPTY")
        params = query()
        topic = topic_from_query(nsqd, params)
        delay = 0.0
        raw_defer = first(params, "defer")
        if raw_defer is not None:
            delay_ms = _go_int64(raw_defer)
            if delay_ms is None or not 0 <= delay_ms <= opts.defer_limit * 1000:
                raise HTTPError(400, "INVALID_DEFER")
            delay = delay_ms / 1000
        await _put(nsqd, topic, [body], delay)
        return "OK"

    @route("/mpub", ["POST"], access_log=False)
    async def mpub() -> str:
        if content_length() > opts.max_body_size:
            raise HTTPError(413, "BODY_TOO_BIG")
        params = query()
        topic = topic_from_query(nsqd, params)
        binary = False
        raw_binary = first(params, "binary")
        if raw_binary is not None:
            binary = BOOL_PARAMS.get(raw_binary, True)
            if raw_binary not in BOOL_PARAMS:
                log.warning("deprecated value '%s' used for /mpub binary param", raw_binary)
        body = await read_body(opts.max_body_size)
        if body is None:
            raise HTTPError(413, "BODY_TOO_BIG")
        if binary:
            bodies = _binary_messages(body, opts.max_msg_size, opts.max_body_size)
        else:
            bodies = _text_messages(body, opts.max_msg_size)
        await _put(nsqd, topic, bodies, 0.0)
        return "OK"

    @route("/stats", ["GET"])
    async def stats() -> Any:
        params = query()
        result = snapshot(
            nsqd,
            topic=first(params, "topic"),
            channel=first(params, "channel"),
            include_clients=BOOL_PARAMS.get(first(params, "include_clients") or "", True),
            include_mem=BOOL_PARAMS.get(first(params, "include_mem") or "", True),
        )
        if first(params, "format") == "json":
            return result
        return format_text(result)

    @app.route("/metrics", methods=["GET"])
    @access_logged(log)
    async def metrics() -> Response:
        """Beyond NSQ: the stats in Prometheus' text exposition format."""
        from .prometheus import CONTENT_TYPE, render_prometheus  # only when asked for

        body = render_prometheus(snapshot(nsqd))
        return Response(body, status=200, headers={"Content-Type": CONTENT_TYPE})

    async def persisted() -> None:
        """Answer after nsqd.dat holds the change (Go persists it before answering)."""
        if not await nsqd.metadata.flush():
            raise HTTPError(500, "INTERNAL_ERROR")

    @route("/topic/create", ["POST"])
    async def topic_create() -> None:
        topic_from_query(nsqd, query())
        await persisted()

    @route("/topic/delete", ["POST"])
    async def topic_delete() -> None:
        name = first(query(), "topic")
        if name is None:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        if name not in nsqd.topics:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        if await replicated_admin(nsqd.topics[name], "topic_delete"):
            return
        nsqd.delete_topic(name)
        await persisted()

    @route("/topic/empty", ["POST"])
    async def topic_empty() -> None:
        topic = existing_topic(nsqd, query(), validate=True)
        if not await replicated_admin(topic, "topic_empty"):
            topic.empty()

    @route("/topic/pause", ["POST"])
    async def topic_pause() -> None:
        topic = existing_topic(nsqd, query(), validate=False)
        if await replicated_admin(topic, "topic_pause"):
            return
        topic.pause()
        await persisted()

    @route("/topic/unpause", ["POST"])
    async def topic_unpause() -> None:
        topic = existing_topic(nsqd, query(), validate=False)
        if await replicated_admin(topic, "topic_unpause"):
            return
        topic.unpause()
        await persisted()

    @route("/topic/takeover", ["POST"])
    async def topic_takeover() -> None:
        """Beyond NSQ (docs/replication.md section 8): the survivor of a two-member replica
        set takes over a replicated topic alone, its vote counted twice."""
        topic = existing_topic(nsqd, query(), validate=True)
        status, message = await topic.take_over()
        if status != 200:
            raise HTTPError(status, message or "INTERNAL_ERROR")

    @route("/channel/create", ["POST"])
    async def channel_create() -> None:
        topic, channel_name = existing_topic_and_channel_name(nsqd, query())
        if await replicated_admin(topic, "channel_create", channel_name):
            return
        topic.get_channel(channel_name)
        await persisted()

    def existing_channel() -> Any:
        topic, channel_name = existing_topic_and_channel_name(nsqd, query())
        channel = topic.channels.get(channel_name)
        if channel is None:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        return topic, channel

    async def replicated_channel_admin(action: str) -> bool:
        topic, channel_name = existing_topic_and_channel_name(nsqd, query())
        return await replicated_admin(topic, action, channel_name)

    @route("/channel/delete", ["POST"])
    async def channel_delete() -> None:
        if await replicated_channel_admin("channel_delete"):
            return
        topic, channel = existing_channel()
        topic.delete_channel(channel.name)
        await persisted()

    @route("/channel/empty", ["POST"])
    async def channel_empty() -> None:
        if not await replicated_channel_admin("channel_empty"):
            existing_channel()[1].empty()

    @route("/channel/pause", ["POST"])
    async def channel_pause() -> None:
        if await replicated_channel_admin("channel_pause"):
            return
        existing_channel()[1].pause()
        await persisted()

    @route("/channel/unpause", ["POST"])
    async def channel_unpause() -> None:
        if await replicated_channel_admin("channel_unpause"):
            return
        existing_channel()[1].unpause()
        await persisted()

    # -- beyond NSQ: peek (docs/nsqd.md, "Beyond NSQ: peek") ----------------------------

    @route("/topic/peek", ["GET"])
    async def topic_peek() -> Any:
        params = query()
        topic = existing_topic(nsqd, params, validate=True)
        from .peek import peek_topic  # only when asked for

        return await peek_topic(nsqd, topic, _peek_n(params))

    @route("/channel/peek", ["GET"])
    async def channel_peek() -> Any:
        channel = existing_channel()[1]
        from .peek import peek_channel

        return await peek_channel(nsqd, channel, _peek_n(query()))

    # -- beyond NSQ: a topic's or channel's own settings ---------------------------------
    # Bounded queues (bounds.py: max_depth, max_bytes, policy) and dead letters and TTL
    # (dead_letter.py: max_attempts, message_ttl), one route for both.

    async def configure(topic: Topic, channel: Any) -> dict[str, Any]:
        """A POST sets the settings given (all validated before any is applied; an empty
        value clears one); both methods answer what is in force and the queue's own
        settings (``settings``)."""
        owner = topic if channel is None else channel
        params = query()
        if request.method == "POST":
            queue_given = {key: params[key][0] for key in _LIMIT_PARAMS if key in params}
            delivery_given = any(key in params for key in _DELIVERY_PARAMS)
            if not queue_given and not delivery_given:
                raise HTTPError(400, "MISSING_ARG_SETTING")
            override = None
            if queue_given:
                override = LimitOverride(**(owner.limit_override or LimitOverride()).to_json())
                try:
                    override.update(queue_given)
                except BoundsError as err:
                    raise HTTPError(400, str(err)) from None
            delivery = None
            if delivery_given:
                delivery = _limits_from_query(nsqd, params, topic.name, owner.delivery_limits)
            if override is not None:
                owner.set_limits(override)
            if delivery_given:
                owner.set_delivery_limits(delivery)
            if not owner.ephemeral:
                nsqd.persist_metadata(topic.name)
                await persisted()
        queue = limits_json(owner)
        own = queue.pop("own")
        limits = describe_limits(topic, channel)
        settings = limits.pop("settings")
        return {**queue, **limits, "settings": {**own, **settings}}

    @route("/topic/config", ["GET", "POST"])
    async def topic_config() -> dict[str, Any]:
        topic = existing_topic(nsqd, query(), validate=True)
        return await configure(topic, None)

    @route("/channel/config", ["GET", "POST"])
    async def channel_config() -> dict[str, Any]:
        topic, channel = existing_channel()
        return await configure(topic, channel)

    @route("/config/<opt>", ["GET", "PUT"])
    async def config(opt: str) -> Any:
        if request.method == "PUT":
            body = await read_body(opts.max_msg_size)
            if not body:
                raise HTTPError(413, "INVALID_VALUE")
            _set_config(nsqd, opt, body)
        try:
            return opts.go_value_by_cfg_key(opt)
        except KeyError:
            raise HTTPError(400, "INVALID_OPTION") from None

    return app


async def _put(nsqd: NSQD, topic: Topic, bodies: list[bytes], delay: float) -> None:
    """Accept the messages; with --sync-ack, answer once they are fsynced, and for a
    replicated topic once a quorum has them (acks.py)."""
    try:
        receipt = topic.put_bodies(bodies, delay)
    except TopicExiting:
        raise HTTPError(503, "EXITING") from None
    except BackendError:
        # Go answers EXITING to any failed put; a disk that refuses says so (the status is
        # Go's: retry later).
        raise HTTPError(503, "PUB_FAILED") from None
    except QueueFull:
        # A full bounded queue (bounds.py): retry later, like any 503.
        raise HTTPError(503, "QUEUE_FULL") from None
    if nsqd.hold_acks and not await acks.wait_published(nsqd, receipt):
        raise HTTPError(503, "EXITING" if nsqd.exiting else "PUB_FAILED")


def _limits_from_query(
    nsqd: NSQD, params: dict[str, list[str]], topic_name: str, current: Limits | None
) -> Limits:
    """The settings after a POST /topic/config or /channel/config: ``max_attempts`` (0 to
    65535) and ``message_ttl`` (a Go duration) set, an empty value clears (the next level's
    apply again), a parameter not given keeps its setting."""
    raw_attempts = first(params, "max_attempts")
    raw_ttl = first(params, "message_ttl")
    limits = Limits() if current is None else Limits(current.max_attempts, current.message_ttl)
    if raw_attempts is not None:
        if raw_attempts == "":
            limits.max_attempts = None
        else:
            value = _go_int64(raw_attempts)
            if value is None or not 0 <= value <= MAX_ATTEMPTS_LIMIT:
                raise HTTPError(400, "INVALID_MAX_ATTEMPTS")
            if value and nsqd.dead_letter_names.is_dead_letter_topic(topic_name):
                # Its dead letters would go to a dead-letter topic's dead-letter topic.
                raise HTTPError(400, "MAX_ATTEMPTS_ON_DEAD_LETTER_TOPIC")
            limits.max_attempts = value
    if raw_ttl is not None:
        if raw_ttl == "":
            limits.message_ttl = None
        else:
            try:
                ttl = parse_duration(raw_ttl)
            except GoParseError:
                raise HTTPError(400, "INVALID_MESSAGE_TTL") from None
            if ttl < 0:
                raise HTTPError(400, "INVALID_MESSAGE_TTL")
            limits.message_ttl = ttl
    return limits


def _text_messages(body: bytes, max_msg_size: int) -> list[bytes]:
    """/mpub's text mode: one message per line; the ``\\n`` is dropped (``\\r`` kept), empty
    lines are skipped."""
    lines = body.split(b"\n")
    messages = [line for line in lines if line]
    if any(len(m) > max_msg_size for m in messages):
        raise HTTPError(413, "MSG_TOO_BIG")
    return messages


def _binary_messages(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    """/mpub's binary mode: the TCP MPUB body format (count, then size-prefixed messages), with
    the TCP parser's checks; its errors answer 413 with the ``E_`` dropped."""
    parser = CommandParser(max_msg_size=max_msg_size, max_body_size=max_body_size)
    parser.feed(b"MPUB t\n" + struct.pack(">I", len(body)) + body)
    try:
        command = parser.next_command()
        if command is None:
            parser.eof()
    except ProtocolError as err:
        raise HTTPError(413, err.code[2:]) from None
    assert command is not None and isinstance(command.body, list)
    return command.body


def _peek_n(params: dict[str, list[str]]) -> int:
    from .peek import parse_n

    n = parse_n(first(params, "n"))
    if n is None:
        raise HTTPError(400, "INVALID_N")
    return n


def _go_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64)."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


def _set_config(nsqd: NSQD, opt: str, body: bytes) -> None:
    """PUT /config/:opt: only the lookupd addresses and the log level can change at runtime."""
    opts = nsqd.options
    if opt == "nsqlookupd_tcp_addresses":
        value = config_address_list(body)
        opts.nsqlookupd_tcp_addresses = value
        nsqd.lookup.set_addresses(value)
    elif opt == "log_level":
        level = config_log_level(body)
        opts.log_level = level
        set_log_level("trionsq.nsqd", level)
    else:
        raise HTTPError(400, "INVALID_OPTION")


async def serve_http(
    nsqd: NSQD,
    address: str,
    *,
    tls: bool = False,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the API on `address` until cancelled, over TLS with nsqd's context when `tls`
    (the HTTPS listener); `task_status.started` gets the bound URLs."""
    context = nsqd.tls_context if tls else None
    if tls and context is None:
        raise ValueError("HTTPS needs a TLS certificate and key")
    await serve_app(
        create_app(nsqd, tls_enabled=tls), address, ssl_context=context, task_status=task_status
    )
