"""nsqadmin's HTTP server (Go's nsqadmin/http.go): the single-page app's pages and static files,
the JSON API over the cluster, the admin actions (with the ACL and notifications) and
``/config/:opt``, all under ``--base-path``, as a quart-trio app served by hypercorn.

API answers follow Go's V1 conventions (`trionsq.http_common`); the aggregated answers also
carry the ``errors`` list (docs/nsqadmin.md, extension (a)), as do the 502 answers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import posixpath
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
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
    first,
    go_json,
    new_app,
    plain_text,
    query,
    read_body,
    respond,
    serve_app,
)
from ..logs import set_log_level
from ..protocol.names import is_valid_channel_name, is_valid_topic_name
from . import aggregate
from .access import config_allowed, is_admin
from .aggregate import Json
from .cluster import Report, TotalFailure
from .history import graphite_history
from .index import (
    PLACEHOLDER_INDEX,
    base_prefix,
    content_type,
    find_static,
    index_config,
    render_index,
)
from .notify import admin_action
from .upstream import UpstreamError

if TYPE_CHECKING:
    from .nsqadmin import NSQAdmin

log = logging.getLogger("trionsq.nsqadmin")

__all__ = ["create_app", "decode_go_json_body", "go_query_error", "serve_http"]

#: Go reads at most 1 MiB of a ``PUT /config`` body.
_CONFIG_BODY_MAX = 1024 * 1024
#: How much of an action's JSON body is read.
_ACTION_BODY_MAX = 1024 * 1024

_PAGES = (
    "/",
    "/topics",
    "/topics/<topic>",
    "/topics/<topic>/<channel>",
    "/nodes",
    "/nodes/<node>",
    "/counter",
    "/lookup",
)

#: The most messages a peek asks each nsqd for (nsqd's own limit).
_PEEK_MAX_N = 1000

#: The request headers a notification uses.
_NOTIFY_HEADERS = ("Host", "User-Agent", "Authorization", "X-Scheme")

ApiHandler = Callable[..., Awaitable[Json]]


def _json_kind(value: Any) -> str:
    """The JSON kind in Go's unmarshal errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def decode_go_json_body(body: bytes, fields: tuple[str, ...]) -> dict[str, str]:
    """Go's ``json.NewDecoder(body).Decode(&struct{...string fields})``: the first JSON value
    of `body` as an object whose `fields` are strings (missing or null: ``""``). Raises
    `ValueError` with Go's error text (``EOF``, ``invalid character ...``, ``json: cannot
    unmarshal ...``)."""
    text = body.decode("utf-8", "replace").lstrip(" \t\r\n")
    if not text:
        raise ValueError("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text):
            raise ValueError("unexpected EOF") from None
        char = text[exc.pos]
        raise ValueError(f"invalid character '{char}' looking for beginning of value") from None
    if value is None:
        return dict.fromkeys(fields, "")
    if not isinstance(value, dict):
        raise ValueError(f"json: cannot unmarshal {_json_kind(value)} into Go value of type struct")
    result: dict[str, str] = {}
    for name in fields:
        # Go matches keys case-insensitively, preferring an exact match
        matches = [k for k in value if k.lower() == name.lower()]
        key = name if name in value else (matches[-1] if matches else None)
        item = value.get(key) if key is not None else None
        if item is not None and not isinstance(item, str):
            raise ValueError(
                f"json: cannot unmarshal {_json_kind(item)} into Go struct field .{name} of "
                "type string"
            )
        result[name] = item or ""
    return result


def _go_quote(text: bytes) -> str:
    """Go's strconv.Quote of a short byte string."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    out = []
    if decoded is not None:
        for char in decoded:
            if char in '"\\':
                out.append("\\" + char)
            elif char.isprintable():
                out.append(char)
            else:
                out.append(f"\\x{ord(char):02x}" if ord(char) < 0x80 else f"\\u{ord(char):04x}")
    else:
        for byte in text:
            char = chr(byte)
            if char in '"\\':
                out.append("\\" + char)
            elif 0x20 <= byte < 0x7F:
                out.append(char)
            else:
                out.append(f"\\x{byte:02x}")
    return '"' + "".join(out) + '"'


def _go_unescape_error(text: bytes) -> str | None:
    """Go's url.QueryUnescape error for `text`, or None when it unescapes."""
    hexdigits = b"0123456789abcdefABCDEF"
    i = 0
    while i < len(text):
        if text[i : i + 1] == b"%":
            if i + 2 >= len(text) or text[i + 1] not in hexdigits or text[i + 2] not in hexdigits:
                return f"invalid URL escape {_go_quote(text[i : i + 3])}"
            i += 3
        else:
            i += 1
    return None


def go_query_error(raw: bytes) -> str:
    """The error text of Go's url.ParseQuery for a raw query it refuses: the first bad escape
    (``invalid URL escape "%zz"``), or ``invalid semicolon separator in query`` when a ``;``
    comes after it."""
    error = ""
    for pair in raw.split(b"&"):
        if b";" in pair:
            error = "invalid semicolon separator in query"
            continue
        for part in pair.split(b"=", 1) if pair else ():
            bad = _go_unescape_error(part)
            if bad is not None:
                error = error or bad
                break
    return error or "INVALID_REQUEST"


def _json_response(status: int, payload: Json) -> Response:
    """A V1 JSON answer with any status (the 502 answers carry ``errors`` too)."""
    return Response(
        go_json(payload),
        status=status,
        headers={"Content-Type": JSON_CONTENT_TYPE, NSQ_CONTENT_TYPE[0]: NSQ_CONTENT_TYPE[1]},
    )


@contextlib.contextmanager
def failing(what: str) -> Iterator[None]:
    """Name the step in Go's words should every upstream fail (`TotalFailure`): Go's
    handlers log ``<what> - <error>`` at ERROR."""
    try:
        yield
    except TotalFailure as failure:
        failure.what = failure.what or what
        raise


def _join(base: str, path: str) -> str:
    """Go's path.Join(basePath, p)."""
    return posixpath.normpath(f"{base}/{path}").replace("//", "/")


def create_app(admin: NSQAdmin) -> QuartTrio:
    """The HTTP server of `admin` as a quart-trio app (routes under its base path)."""
    app = new_app("trionsq.nsqadmin", log)
    app.url_map.merge_slashes = False  # "//" is not redirected: paths are taken as given
    base = admin.options.base_path
    prefix = base_prefix(base)

    def bp(path: str) -> str:
        return _join(base, path)

    def admin_request() -> bool:
        o = admin.options
        return is_admin(o.admin_users, request.headers.get(o.acl_http_header, ""))

    def require_admin() -> None:
        if not admin_request():
            raise HTTPError(403, "FORBIDDEN")

    def notify(action: str, topic: str, channel: str = "", node: str = "") -> None:
        if not admin.options.notification_http_endpoint:
            return
        client = request.scope.get("client") or ("", 0)
        payload = admin_action(
            action,
            topic,
            channel,
            node,
            headers={k: request.headers.get(k, "") for k in _NOTIFY_HEADERS},
            remote_addr=aggregate.join_host_port(str(client[0]), client[1]),
            path=request.path,
            query=request.query_string.decode("latin-1"),
            tls=request.scheme == "https",
            timestamp=int(time.time()),
        )
        admin.notifier.notify(payload)

    def api(path: str, methods: list[str]) -> Callable[[ApiHandler], ApiHandler]:
        """Register a V1 API handler; it gets a `Report` and returns its answer, to which the
        wrapper adds ``message`` and ``errors``."""

        def register(handler: ApiHandler) -> ApiHandler:
            @access_logged(log)
            async def endpoint(**kwargs: Any) -> Response:
                report = Report()
                try:
                    payload = await handler(report=report, **kwargs)
                except HTTPError as err:
                    return respond(err.message, err.status)
                except TotalFailure as failure:
                    if failure.what:
                        log.error("%s - %s", failure.what, failure)
                    else:
                        log.error("%s", failure)
                    errors = Report()
                    errors.errors = [*report.errors, *failure.errors]
                    return _json_response(
                        502,
                        {
                            "message": f"UPSTREAM_ERROR: {failure}",
                            "errors": errors.errors_json(),
                        },
                    )
                payload["message"] = report.message
                payload["errors"] = report.errors_json()
                return respond(payload)

            endpoint.__name__ = handler.__name__
            app.add_url_rule(bp(path), view_func=endpoint, methods=methods)
            return handler

        return register

    # -- pages and files ------------------------------------------------------------------

    @access_logged(log)
    async def index(**_: str) -> Response:
        o = admin.options
        path = find_static(admin.static_dir, "index.html")
        template = PLACEHOLDER_INDEX if path is None else await trio.Path(path).read_text("utf-8")
        config = index_config(
            version=NSQ_VERSION,
            base=prefix,
            is_admin=admin_request(),
            lookupd=o.nsqlookupd_http_addresses,
            nsqd=o.nsqd_http_addresses,
            graphite_url=o.graphite_url,
            proxy_graphite=o.proxy_graphite,
            statsd_interval=o.statsd_interval,
            statsd_prefix=o.statsd_prefix,
            statsd_counter_format=o.statsd_counter_format,
            statsd_gauge_format=o.statsd_gauge_format,
            acl_http_header=o.acl_http_header,
        )
        return Response(
            render_index(template, prefix, config),
            headers={"Content-Type": "text/html; charset=utf-8"},
        )

    for page in _PAGES:
        app.add_url_rule(bp(page), f"page:{page}", index, methods=["GET"])
    if base != "/":
        app.add_url_rule(base + "/", "page:base/", index, methods=["GET"])

    @access_logged(log)
    async def static_asset(asset: str) -> Response:
        found = find_static(admin.static_dir, asset)
        if found is None and request.path.startswith(bp("/fonts/")):
            found = find_static(admin.static_dir, f"fonts/{asset}")
        if found is None:
            return plain_text("NOT_FOUND", 404)
        data = await trio.Path(found).read_bytes()
        return Response(data, headers={"Content-Type": content_type(found.name)})

    app.add_url_rule(bp("/static/<path:asset>"), "static_asset", static_asset, methods=["GET"])
    app.add_url_rule(bp("/fonts/<path:asset>"), "font_asset", static_asset, methods=["GET"])

    admin.requests.install(app)

    @app.route(bp("/ping"), methods=["GET"])
    @access_logged(log)
    async def ping() -> Response:
        return plain_text("OK")

    @app.route(bp("/metrics"), methods=["GET"])
    @access_logged(log)
    async def metrics() -> Response:
        """Beyond NSQ: nsqadmin's requests and its calls to the cluster, Prometheus' format."""
        from trionsq.prometheus_text import CONTENT_TYPE

        from .metrics import render_metrics  # only when asked for

        return Response(render_metrics(admin), headers={"Content-Type": CONTENT_TYPE})

    # -- reading the cluster --------------------------------------------------------------

    @api("/api/topics", ["GET"])
    async def topics(report: Report) -> Json:
        try:
            params = query()
        except HTTPError:
            # Go's topicsHandler answers url.ParseQuery's own error text
            raise HTTPError(400, go_query_error(request.query_string)) from None
        cluster = admin.cluster
        nsqd_answers: list[tuple[str, Json]] | None = None
        with failing("failed to get topics"):
            if cluster.lookupd_addresses:
                names = await cluster.lookupd_topics(report)
            else:
                names, nsqd_answers = await cluster.nsqd_topics(report)
        if first(params, "inactive") == "true":
            inactive: dict[str, list[str]] = {}
            if cluster.lookupd_addresses:
                inactive = await _inactive_topics(admin, names)
            return {"topics": inactive}
        result: Json = {"topics": names}
        if first(params, "stats") == "true":
            if nsqd_answers is None:
                producers = await cluster.lookupd_producers(report)
                addresses = [aggregate.producer_http_address(p) for p in producers]
                nsqd_answers = (
                    await cluster.nsqd_stats_by_address(addresses, report) if addresses else []
                )
            result["stats"] = aggregate.topics_summary(names, [s for _, s in nsqd_answers])
        return result

    @api("/api/topics/<topic>", ["GET"])
    async def topic(report: Report, topic: str) -> Json:
        with failing("failed to get topic producers"):
            producers = await admin.cluster.topic_producers(topic, report)
        with failing("failed to get topic metadata"):
            per_node, _ = await admin.cluster.nsqd_stats(
                producers, report, topic=topic, include_clients=False
            )
        return aggregate.aggregate_topic(topic, per_node)

    @api("/api/topics/<topic>/<channel>", ["GET"])
    async def channel(report: Report, topic: str, channel: str) -> Json:
        with failing("failed to get topic producers"):
            producers = await admin.cluster.topic_producers(topic, report)
        with failing("failed to get channel metadata"):
            _, channels = await admin.cluster.nsqd_stats(
                producers, report, topic=topic, channel=channel, include_clients=True
            )
        stats = channels.get(channel) or aggregate.aggregate_channel(topic, channel, [])
        aggregate.sort_clients_by_node_topology(stats["clients"])
        return stats

    @api("/api/topics/<topic>/<channel>/peek", ["GET"])
    async def channel_peek(report: Report, topic: str, channel: str) -> Json:
        """Beyond NSQ: each nsqd's ``/channel/peek`` of the channel (docs/nsqadmin.md,
        extension (d)). Message bodies are data, not stats: only admin users may see them."""
        require_admin()
        n = first(query(), "n") or "10"
        if not (n.isascii() and n.isdigit() and 1 <= int(n) <= _PEEK_MAX_N):
            raise HTTPError(400, "INVALID_N")
        producers = await admin.cluster.topic_producers(topic, report)
        return {"nodes": await admin.cluster.peek_channel(producers, topic, channel, n)}

    @api("/api/nodes", ["GET"])
    async def nodes(report: Report) -> Json:
        with failing("failed to get nodes"):
            producers = await admin.cluster.producers(report, keep_unreachable=True)
        await admin.cluster.probe(producers, report)
        return {"nodes": producers}

    @api("/api/nodes/<node>", ["GET"])
    async def node(report: Report, node: str) -> Json:
        with failing("failed to get producers"):
            producers = await admin.cluster.producers(report, keep_unreachable=True)
        producer = next((p for p in producers if aggregate.producer_http_address(p) == node), None)
        if producer is None:
            raise HTTPError(404, "NODE_NOT_FOUND")
        with failing("failed to get nsqd stats"):
            per_node, _ = await admin.cluster.nsqd_stats([producer], report, include_clients=True)
        total_clients = sum(len(c["clients"]) for t in per_node for c in t["channels"])
        total_messages = sum(t["message_count"] for t in per_node)
        return {
            "node": node,
            "topics": per_node,
            "total_messages": total_messages,
            "total_clients": total_clients,
        }

    @api("/api/counter", ["GET"])
    async def counter(report: Report) -> Json:
        with failing("failed to get counter producer list"):
            producers = await admin.cluster.producers(report)
        with failing("failed to get nsqd stats"):
            _, channels = await admin.cluster.nsqd_stats(producers, report, include_clients=False)
        return {"stats": aggregate.counter_stats(channels)}

    # -- actions --------------------------------------------------------------------------

    async def action_body(fields: tuple[str, ...], bad_body: str | None = None) -> dict[str, str]:
        body = await read_body(_ACTION_BODY_MAX)
        try:
            return decode_go_json_body(body or b"", fields)
        except ValueError as exc:
            raise HTTPError(400, bad_body or str(exc)) from None

    @api("/api/topics", ["POST"])
    async def create_topic_channel(report: Report) -> Json:
        require_admin()
        body = await action_body(("topic", "channel"))
        topic_name, channel_name = body["topic"], body["channel"]
        if not is_valid_topic_name(topic_name):
            raise HTTPError(400, "INVALID_TOPIC")
        if channel_name and not is_valid_channel_name(channel_name):
            raise HTTPError(400, "INVALID_CHANNEL")
        with failing("failed to create topic/channel"):
            await admin.cluster.create_topic_channel(topic_name, channel_name, report)
        notify("create_topic", topic_name)
        if channel_name:
            notify("create_channel", topic_name, channel_name)
        return {}

    async def topic_channel_action(report: Report, topic_name: str, channel_name: str) -> Json:
        require_admin()
        body = await action_body(("action",))
        action = body["action"]
        if action not in ("pause", "unpause", "empty"):
            raise HTTPError(400, "INVALID_ACTION")
        with failing(f"failed to {action} topic/channel"):
            await admin.cluster.topic_channel_action(action, topic_name, channel_name, report)
        if channel_name:
            notify(f"{action}_channel", topic_name, channel_name)
        else:
            notify(f"{action}_topic", topic_name)
        return {}

    @api("/api/topics/<topic>", ["POST"])
    async def topic_action(report: Report, topic: str) -> Json:
        return await topic_channel_action(report, topic, "")

    @api("/api/topics/<topic>/<channel>", ["POST"])
    async def channel_action(report: Report, topic: str, channel: str) -> Json:
        return await topic_channel_action(report, topic, channel)

    @api("/api/topics/<topic>", ["DELETE"])
    async def delete_topic(report: Report, topic: str) -> Json:
        require_admin()
        with failing("failed to delete topic"):
            await admin.cluster.delete_topic(topic, report)
        notify("delete_topic", topic)
        return {}

    @api("/api/topics/<topic>/<channel>", ["DELETE"])
    async def delete_channel(report: Report, topic: str, channel: str) -> Json:
        require_admin()
        with failing("failed to delete channel"):
            await admin.cluster.delete_channel(topic, channel, report)
        notify("delete_channel", topic, channel)
        return {}

    @api("/api/nodes/<node>", ["DELETE"])
    async def tombstone_node_for_topic(report: Report, node: str) -> Json:
        require_admin()
        body = await action_body(("topic",), bad_body="INVALID_BODY")
        if not is_valid_topic_name(body["topic"]):
            raise HTTPError(400, "INVALID_TOPIC")
        with failing("failed to tombstone node for topic"):
            await admin.cluster.tombstone_node_for_topic(body["topic"], node, report)
        notify("tombstone_topic_producer", body["topic"], node=node)
        return {}

    # -- graphite -------------------------------------------------------------------------

    @access_logged(log)
    async def graphite(**_: Any) -> Response:
        try:
            return respond(await _graphite_rate(admin))
        except HTTPError as err:
            return respond(err.message, err.status)

    app.add_url_rule(bp("/api/graphite"), "graphite", graphite, methods=["GET"])

    # -- chart history (beyond NSQ) -------------------------------------------------------

    @api("/api/history", ["GET"])
    async def topics_history(report: Report) -> Json:
        # Sampled history only: with graphite the rows start from the page's polls.
        if admin.options.graphite_url:
            return {"interval": 0, "source": "graphite", "topics": {}}
        return admin.history.topic_rates(ROW_CHART_POINTS)

    @api("/api/history/<topic>", ["GET"])
    async def topic_history(report: Report, topic: str) -> Json:
        return await _history(admin, topic)

    @api("/api/history/<topic>/<channel>", ["GET"])
    async def channel_history(report: Report, topic: str, channel: str) -> Json:
        return await _history(admin, topic, channel)

    if admin.options.proxy_graphite:

        async def render() -> Response:
            return await _proxy_graphite(admin)

        app.add_url_rule(bp("/render"), "render", render, methods=["GET"])

    # -- /config --------------------------------------------------------------------------

    @access_logged(log)
    async def config(opt: str) -> Response:
        try:
            return respond(await _config(admin, opt))
        except HTTPError as err:
            return respond(err.message, err.status)

    app.add_url_rule(bp("/config/<opt>"), "config", config, methods=["GET", "PUT"])

    return app


async def _inactive_topics(admin: NSQAdmin, names: list[str]) -> dict[str, list[str]]:
    """``?inactive=true``: the topics no lookupd has a producer for, with their channels
    (lookup failures are ignored, as in Go)."""
    result: dict[str, list[str] | None] = dict.fromkeys(names)

    async def check(name: str) -> None:
        try:
            producers = await admin.cluster.lookupd_topic_producers(name, Report())
            if not producers:
                result[name] = await admin.cluster.lookupd_topic_channels(name, Report())
        except TotalFailure:
            pass

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(check, name)
    return {name: channels for name, channels in result.items() if channels is not None}


#: The points of a row's rate chart (the UI's ``config.chartPoints``).
ROW_CHART_POINTS = 60


async def _history(admin: NSQAdmin, topic: str, channel: str = "") -> Json:
    """The last hour of a topic's or channel's rate and depth for its charts: from graphite
    with ``--graphite-url``, else what nsqadmin sampled itself (`history`)."""
    if not admin.options.graphite_url:
        return admin.history.series(topic, channel)
    try:
        return await graphite_history(
            admin.options, admin.cluster.client.get_url_json, topic, channel
        )
    except (UpstreamError, LookupError, TypeError, ValueError, AttributeError) as exc:
        log.error("graphite request failed - %s", exc)
        raise HTTPError(502, "UPSTREAM_ERROR: graphite") from None


async def _graphite_rate(admin: NSQAdmin) -> Json:
    """Go's graphiteHandler: the per-second rate of a statsd counter over the last full
    interval, from graphite's ``/render``."""
    params = query()
    if first(params, "metric") != "rate":
        raise HTTPError(400, "INVALID_ARG_METRIC")
    target = first(params, "target")
    if target is None:
        raise HTTPError(400, "INVALID_ARG_TARGET")
    o = admin.options
    interval = int(o.statsd_interval)
    render = urlencode(
        {
            "format": "json",
            "from": f"-{interval * 2}sec",
            "target": target,
            "until": f"-{interval}sec",
        }
    )
    url = f"{o.graphite_url}/render?{render}"
    log.info("GRAPHITE: %s", url)
    try:
        answer = await admin.cluster.client.get_url_json(url)
        rate = answer[0]["datapoints"][0][0]
        rate = float(rate)
    except (UpstreamError, LookupError, TypeError, ValueError) as exc:
        log.error("graphite request failed - %s", exc)
        raise HTTPError(500, "INTERNAL_ERROR") from None
    if rate < 0:
        return {"rate": "N/A"}
    return {"rate": f"{rate / max(interval, 1):.2f}"}


async def _proxy_graphite(admin: NSQAdmin) -> Response:
    """``--proxy-graphite``: ``GET /render?...`` relayed to ``--graphite-url`` (with its basic
    auth credentials, when the URL has some)."""
    o = admin.options
    parts = urlsplit(o.graphite_url)
    netloc = parts.netloc.rpartition("@")[2]  # credentials go in the Authorization header
    url = urlunsplit((parts.scheme, netloc, "/render", request.query_string.decode(), ""))
    auth = (parts.username or "", parts.password or "") if parts.username else None
    client = admin.cluster.client
    try:
        with trio.fail_after(client.request_timeout):
            answer = await client.client.get(url, auth=auth)
    except (httpx.HTTPError, trio.TooSlowError) as exc:
        log.error("graphite proxy failed - %s", exc)
        return Response("Bad Gateway", status=502)
    headers = {"Content-Type": answer.headers.get("Content-Type", "application/octet-stream")}
    return Response(answer.content, status=answer.status_code, headers=headers)


async def _config(admin: NSQAdmin, opt: str) -> Any:
    """GET/PUT ``/config/:opt`` with Go's CIDR check and the two settable options."""
    client = request.scope.get("client") or ("", 0)
    allowed = config_allowed(admin.options.allow_config_from_cidr, str(client[0]))
    if allowed is None:
        raise HTTPError(400, "INVALID_REMOTE_ADDR")
    if not allowed:
        raise HTTPError(403, "FORBIDDEN")
    if request.method == "PUT":
        body = await read_body(_CONFIG_BODY_MAX)
        if not body:
            raise HTTPError(413, "INVALID_VALUE")
        if opt == "nsqlookupd_http_addresses":
            value = config_address_list(body)
            admin.options = dataclasses.replace(admin.options, nsqlookupd_http_addresses=value)
        elif opt == "log_level":
            level = config_log_level(body)
            admin.options = dataclasses.replace(admin.options, log_level=level)
            set_log_level("trionsq.nsqadmin", level)
        else:
            raise HTTPError(400, "INVALID_OPTION")
    try:
        return admin.options.go_value_by_cfg_key(opt)
    except KeyError:
        raise HTTPError(400, "INVALID_OPTION") from None


async def serve_http(
    admin: NSQAdmin,
    address: str,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve nsqadmin on `address` until cancelled; `task_status.started` gets the bound URLs."""
    await serve_app(create_app(admin), address, task_status=task_status)
