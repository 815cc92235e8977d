"""nsqlookupd's HTTP API (docs/protocol.md §6.3): a quart-trio app served by hypercorn inside
nsqlookupd's nursery, with Go nsqlookupd's routes, statuses, errors and JSON shapes.

Responses are Go's V1 format (`trionsq.http_common`): ``X-NSQ-Content-Type: nsq; version=1.0``
on all but ``/ping``, errors as ``{"message": "<TEXT>"}``, empty lists as ``[]``. Parameters
come from the query string, parsed as Go's url.ParseQuery (malformed: 400 INVALID_REQUEST) by
the routes that take any. ``"*"`` is a wildcard wherever Go's lookups treat it as one (e.g.
``/channels?topic=*`` lists every channel, ``/topic/delete?topic=*`` deletes every topic).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import trio
from quart import Response
from quart_trio import QuartTrio

from .. import NSQ_VERSION
from ..http_common import (
    HTTPError,
    access_logged,
    first,
    new_app,
    plain_text,
    query,
    serve_app,
    v1_route,
)
from ..protocol.names import is_valid_channel_name, is_valid_topic_name
from .registration_db import CHANNEL, CLIENT, TOPIC, Registration

if TYPE_CHECKING:
    from .nsqlookupd import NSQLookupd

log = logging.getLogger("trionsq.nsqlookupd")


def _topic(params: dict[str, list[str]]) -> str:
    topic = first(params, "topic")
    if topic is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    return topic


def _topic_and_channel(params: dict[str, list[str]]) -> tuple[str, str]:
    """Go's http_api.GetTopicChannelArgs."""
    topic = _topic(params)
    if not is_valid_topic_name(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    channel = first(params, "channel")
    if channel is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_channel_name(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def create_app(lookupd: NSQLookupd) -> QuartTrio:
    """The HTTP API of `lookupd` as a quart-trio app."""
    app = new_app("trionsq.nsqlookupd", log)
    route = functools.partial(v1_route, app)
    db = lookupd.db
    opts = lookupd.options

    lookupd.requests.install(app)

    @app.route("/ping", methods=["GET"])
    @access_logged(log)
    async def ping() -> Response:
        return plain_text("OK")

    @app.route("/metrics", methods=["GET"])
    @access_logged(log)
    async def metrics() -> Response:
        """Beyond NSQ: registrations, connections and requests in Prometheus' text format."""
        from trionsq.prometheus_text import CONTENT_TYPE

        from .metrics import render_metrics  # only when asked for

        return Response(render_metrics(lookupd), headers={"Content-Type": CONTENT_TYPE})

    @route("/info", ["GET"])
    async def info() -> dict[str, Any]:
        return {"version": NSQ_VERSION}

    @route("/topics", ["GET"])
    async def topics() -> dict[str, Any]:
        return {"topics": [k.key for k in db.find_registrations(TOPIC, "*", "")]}

    @route("/channels", ["GET"])
    async def channels() -> dict[str, Any]:
        topic = _topic(query())
        return {"channels": [k.subkey for k in db.find_registrations(CHANNEL, topic, "*")]}

    @route("/lookup", ["GET"])
    async def lookup() -> dict[str, Any]:
        topic = _topic(query())
        if not db.find_registrations(TOPIC, topic, ""):
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        channels = [k.subkey for k in db.find_registrations(CHANNEL, topic, "*")]
        producers = db.filter_by_active(
            db.find_producers(TOPIC, topic, ""),
            opts.inactive_producer_timeout,
            opts.tombstone_lifetime,
        )
        return {"channels": channels, "producers": [p.peer_info.to_json() for p in producers]}

    @route("/nodes", ["GET"])
    async def nodes() -> dict[str, Any]:
        # Tombstoned producers are listed (a zero lifetime), with a flag per topic.
        clients = db.filter_by_active(
            db.find_producers(CLIENT, "", ""), opts.inactive_producer_timeout, 0
        )
        result = []
        for client in clients:
            peer = client.peer_info
            topics = [k.key for k in db.lookup_registrations(peer.id) if k.category == TOPIC]
            tombstones = []
            for topic in topics:
                producer = db.producer(Registration(TOPIC, topic, ""), peer.id)
                tombstoned = producer is not None and db.is_tombstoned(
                    producer, opts.tombstone_lifetime
                )
                tombstones.append(tombstoned)
            node = peer.to_json()
            node["tombstones"] = tombstones
            node["topics"] = topics
            result.append(node)
        return {"producers": result}

    @route("/topic/create", ["POST"])
    async def topic_create() -> None:
        topic = _topic(query())
        if not is_valid_topic_name(topic):
            raise HTTPError(400, "INVALID_ARG_TOPIC")
        log.info("DB: adding topic(%s)", topic)
        db.add_registration(Registration(TOPIC, topic, ""))

    @route("/topic/delete", ["POST"])
    async def topic_delete() -> None:
        topic = _topic(query())
        for key in db.find_registrations(CHANNEL, topic, "*"):
            log.info("DB: removing channel(%s) from topic(%s)", key.subkey, topic)
            db.remove_registration(key)
        for key in db.find_registrations(TOPIC, topic, ""):
            log.info("DB: removing topic(%s)", topic)
            db.remove_registration(key)

    @route("/topic/tombstone", ["POST"])
    async def topic_tombstone() -> None:
        params = query()
        topic = _topic(params)
        node = first(params, "node")
        if node is None:
            raise HTTPError(400, "MISSING_ARG_NODE")
        log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        for producer in db.find_producers(TOPIC, topic, ""):
            if producer.node == node:
                db.tombstone(producer)

    @route("/channel/create", ["POST"])
    async def channel_create() -> None:
        topic, channel = _topic_and_channel(query())
        log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        db.add_registration(Registration(CHANNEL, topic, channel))
        log.info("DB: adding topic(%s)", topic)
        db.add_registration(Registration(TOPIC, topic, ""))

    @route("/channel/delete", ["POST"])
    async def channel_delete() -> None:
        topic, channel = _topic_and_channel(query())
        keys = db.find_registrations(CHANNEL, topic, channel)
        if not keys:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        for key in keys:
            db.remove_registration(key)

    @route("/debug", ["GET"])
    async def debug() -> dict[str, Any]:
        # Go's map of maps: keys sorted at both levels; keys without producers are absent.
        data: dict[str, list[dict[str, Any]]] = {}
        for key, producers in db.items():
            for p in producers:
                peer = p.peer_info
                entry = {
                    "broadcast_address": peer.broadcast_address,
                    "hostname": peer.hostname,
                    "http_port": peer.http_port,
                    "id": peer.id,
                    "last_update": peer.last_update_ns,
                    "tcp_port": peer.tcp_port,
                    "tombstoned": p.tombstoned,
                    "tombstoned_at": p.tombstoned_at_ns,
                    "topology_region": peer.topology_region,
                    "topology_zone": peer.topology_zone,
                    "version": peer.version,
                }
                data.setdefault(f"{key.category}:{key.key}:{key.subkey}", []).append(entry)
        return dict(sorted(data.items()))

    return app


async def serve_http(
    lookupd: NSQLookupd,
    address: str,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the API on `address` until cancelled; `task_status.started` gets the bound URLs."""
    await serve_app(create_app(lookupd), address, task_status=task_status)
