"""The HTTP plumbing every trionsq daemon's API shares (Go NSQ's ``internal/http_api``): Go-style
responses and errors, Go's query-string parsing, request-body handling as Go's net/http does it,
the route decorator, and serving a quart-trio app with hypercorn inside a Trio nursery.

Access lines are Go's ``http_api.Log`` decorator's, ``200 GET /ping (127.0.0.1:54321) 1.47µs``
(status, method, request URI, client address, the handler's time as Go's Duration prints it),
for the routes Go logs (`v1_route`'s ``access_log``, `access_logged`) and for 404, 405 and 500.

Responses follow Go's ``RespondV1``: every answer but ``/ping``'s carries
``X-NSQ-Content-Type: nsq; version=1.0``; a string answers as text, ``None`` as an empty body, a
value as JSON, an error as ``{"message": "<TEXT>"}`` with its status. Unknown paths answer
404 ``NOT_FOUND``, a known path with the wrong method 405 ``METHOD_NOT_ALLOWED`` (with
httprouter's ``Allow`` header), an exception 500 ``INTERNAL_ERROR``.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote_plus

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, g, request
from quart_trio import QuartTrio

from .goerrors import host_port
from .options.goparse import format_duration

__all__ = [
    "JSON_CONTENT_TYPE",
    "MAX_DISCARD",
    "NSQ_CONTENT_TYPE",
    "HTTPError",
    "Handler",
    "access_logged",
    "content_length",
    "discard_body",
    "first",
    "go_json",
    "new_app",
    "parse_query",
    "plain_text",
    "query",
    "read_body",
    "respond",
    "serve_app",
    "v1_route",
]

NSQ_CONTENT_TYPE = ("X-NSQ-Content-Type", "nsq; version=1.0")
JSON_CONTENT_TYPE = "application/json; charset=utf-8"
#: What Go's net/http sniffs for a text answer.
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"


class HTTPError(Exception):
    """An answer other than 200: the status and NSQ's message text."""

    def __init__(self, status: int, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: Go's error behind it, for a log line (e.g. url.ParseQuery's).
        self.detail = detail


# -- responses ------------------------------------------------------------------------------


def respond(data: Any = None, status: int = 200) -> Response:
    """Go's RespondV1: text for str/bytes, empty for None, JSON for anything else; an error is
    JSON ``{"message": ...}`` with its status."""
    headers = {NSQ_CONTENT_TYPE[0]: NSQ_CONTENT_TYPE[1]}
    body: bytes | str
    if status != 200:
        body = go_json({"message": str(data)})
        headers["Content-Type"] = JSON_CONTENT_TYPE
    elif data is None:
        body = b""
    elif isinstance(data, str | bytes):
        body = data
        headers["Content-Type"] = TEXT_CONTENT_TYPE
    else:
        body = go_json(data)
        headers["Content-Type"] = JSON_CONTENT_TYPE
    response = Response(body, status=status, headers=headers)
    if data is None and status == 200:
        del response.headers["Content-Type"]
    return response


def plain_text(text: str, status: int = 200) -> Response:
    """Go's PlainText decorator (``/ping``): the text alone, no ``X-NSQ-Content-Type``."""
    return Response(text, status=status, headers={"Content-Type": TEXT_CONTENT_TYPE})


def go_json(value: Any) -> str:
    """JSON as Go's encoding/json writes it: compact, with <, > and & escaped. (Go sorts a
    map's keys and keeps a struct's field order: callers build their dicts in that order.)"""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- query parameters -----------------------------------------------------------------------

_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def parse_query(raw: bytes) -> dict[str, list[str]]:
    """Go's url.ParseQuery: ``&``-separated, ``+`` is a space, a bad ``%`` escape or a ``;``
    is an error (400 INVALID_REQUEST)."""
    params: dict[str, list[str]] = {}
    for part in raw.split(b"&"):
        if not part:
            continue
        if b";" in part:
            raise HTTPError(400, "INVALID_REQUEST", "invalid semicolon separator in query")
        bad = _BAD_ESCAPE.search(part)
        if bad:
            escape = part[bad.start() : bad.start() + 3].decode("latin-1")
            raise HTTPError(400, "INVALID_REQUEST", f"invalid URL escape {json.dumps(escape)}")
        key, _, value = part.partition(b"=")
        name = unquote_plus(key.decode("latin-1"), encoding="utf-8", errors="replace")
        params.setdefault(name, []).append(
            unquote_plus(value.decode("latin-1"), encoding="utf-8", errors="replace")
        )
    return params


def query() -> dict[str, list[str]]:
    """The current request's query parameters (`parse_query`)."""
    return parse_query(request.query_string)


def first(params: dict[str, list[str]], name: str) -> str | None:
    """Go's ``ReqParams.Get``: the first value of `name`, or None when the key is absent."""
    values = params.get(name)
    return values[0] if values else None


# -- request bodies -------------------------------------------------------------------------


async def read_body(limit: int) -> bytes | None:
    """The request body, or None when it is longer than `limit` (read no further than that)."""
    data = bytearray()
    async for chunk in request.body:
        data += chunk
        g.body_bytes_read = len(data)
        if len(data) > limit:
            return None
    g.body_done = True
    return bytes(data)


#: Go's net/http maxPostHandlerReadBytes: how much unread body it discards after a handler.
MAX_DISCARD = 256 * 1024


async def discard_body(response: Response) -> Response:
    """Go's net/http after a handler: discard what is left of the request body (up to 256 KiB)
    so the connection can take the next request; with more left, close it after the answer.
    (Answering before hypercorn has seen the body's end leaves a keep-alive connection stuck.)"""
    if g.get("body_done"):
        return response
    length = request.content_length
    if length is not None and length - g.get("body_bytes_read", 0) > MAX_DISCARD:
        response.headers["Connection"] = "close"
        return response
    seen = 0
    async for chunk in request.body:
        seen += len(chunk)
        if seen > MAX_DISCARD:
            response.headers["Connection"] = "close"
            break
    return response


def config_address_list(body: bytes) -> list[str]:
    """A ``PUT /config/<addresses>`` body: a JSON array of strings (``null`` is empty), else
    Go's 400 ``INVALID_VALUE``."""
    try:
        value = json.loads(body)
    except ValueError:
        raise HTTPError(400, "INVALID_VALUE") from None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HTTPError(400, "INVALID_VALUE")
    return value


def config_log_level(body: bytes) -> str:
    """A ``PUT /config/log_level`` body as a normalised level name, else 400 ``INVALID_VALUE``."""
    from .logs import parse_log_level

    try:
        return parse_log_level(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise HTTPError(400, "INVALID_VALUE") from None


def content_length() -> int:
    """The request's Content-Length, -1 when it has none (Go's ``req.ContentLength``)."""
    length = request.content_length
    return -1 if length is None else length


# -- the app and its routes -----------------------------------------------------------------

Handler = Callable[..., Awaitable[Any]]


# -- access lines ---------------------------------------------------------------------------


def log_access(log: logging.Logger, status: int, started_ns: int) -> None:
    """Go's access line for the current request, begun at `started_ns`
    (`time.perf_counter_ns`): formatted only when INFO is enabled."""
    if not log.isEnabledFor(logging.INFO):
        return
    elapsed = time.perf_counter_ns() - started_ns
    scope = request.scope
    uri = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    query_string = scope.get("query_string")
    if query_string:
        uri += "?" + query_string.decode("latin-1")
    client = scope.get("client")
    remote = host_port(client[0], client[1]) if client else ""
    log.info("%d %s %s (%s) %s", status, request.method, uri, remote, format_duration(elapsed))


def access_logged(log: logging.Logger) -> Callable[[Handler], Handler]:
    """Log Go's access line for each request a (non-V1) handler answers."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def logged(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            response = await handler(*args, **kwargs)
            log_access(log, getattr(response, "status_code", 200), started)
            return response

        return logged

    return decorate


def _app_log(app: QuartTrio) -> logging.Logger:
    log: logging.Logger = app.extensions["nsq_log"]
    return log


def new_app(name: str, log: logging.Logger) -> QuartTrio:
    """A quart-trio app with Go's 404/405/500 answers and its body handling; errors and
    access lines are logged on `log`."""
    # No Quart static route: it would answer /static/<file> from the package's folder before
    # nsqadmin's own route (which honours --dev-static-dir and Go's plain-text 404).
    app = QuartTrio(name, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = None  # limits are the daemon's, checked per route
    app.extensions["nsq_log"] = log
    app.after_request(discard_body)

    # Go's router answers these itself, each logged by its Log decorator.
    @app.errorhandler(404)
    async def not_found(_: Exception) -> Response:
        started = time.perf_counter_ns()
        response = respond("NOT_FOUND", 404)
        log_access(log, 404, started)
        return response

    @app.errorhandler(405)
    async def method_not_allowed(err: Exception) -> Response:
        started = time.perf_counter_ns()
        response = respond("METHOD_NOT_ALLOWED", 405)
        valid = getattr(err, "valid_methods", None)
        if valid:
            # httprouter's Allow: the path's methods (no implicit HEAD) and OPTIONS, sorted.
            allowed = (set(valid) - {"HEAD"}) | {"OPTIONS"}
            response.headers["Allow"] = ", ".join(sorted(allowed))
        log_access(log, 405, started)
        return response

    @app.errorhandler(Exception)
    async def internal_error(err: Exception) -> Response:
        # Go's PanicHandler: its line, then a logged 500 (with the traceback, for us).
        started = time.perf_counter_ns()
        log.error("panic in HTTP handler - %s", err, exc_info=err)
        log_access(log, 500, started)
        return respond("INTERNAL_ERROR", 500)

    return app


def v1_route(
    app: QuartTrio, path: str, methods: list[str], *, access_log: bool = True
) -> Callable[[Handler], Handler]:
    """Register a handler under Go's V1 decorator: its return value goes through `respond`,
    an `HTTPError` it raises answers with that status and message. With `access_log` (Go's
    Log decorator: every route but nsqd's /pub and /mpub), each request logs its access
    line."""
    log = _app_log(app) if access_log else None

    def register(handler: Handler) -> Handler:
        async def endpoint(**kwargs: Any) -> Response:
            started = time.perf_counter_ns() if log is not None else 0
            try:
                data = await handler(**kwargs)
            except HTTPError as err:
                if log is not None:
                    log_access(log, err.status, started)
                return respond(err.message, err.status)
            if log is not None:  # Go's Log decorator times the handler, not the encoding
                log_access(log, 200, started)
            return respond(data)

        endpoint.__name__ = handler.__name__
        app.add_url_rule(path, view_func=endpoint, methods=methods)
        return handler

    return register


# -- serving --------------------------------------------------------------------------------


class _TLSConfig(Config):
    """Hypercorn's config serving HTTPS with a context built elsewhere (hypercorn's own
    would set its ciphers, a TLS 1.2 floor and ALPN h2)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    @property
    def ssl_enabled(self) -> bool:
        return True

    def create_ssl_context(self) -> ssl.SSLContext:
        return self._context


async def serve_app(
    app: QuartTrio,
    address: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` on `address` (``host:port``) with hypercorn until cancelled, over TLS with
    `ssl_context`; `task_status.started` gets the bound URLs."""
    config = Config() if ssl_context is None else _TLSConfig(ssl_context)
    config.bind = [address]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 0
    await serve(_shield_sends(app), config, task_status=task_status)


def _shield_sends(app: QuartTrio) -> Callable[..., Awaitable[None]]:
    """The app with its ASGI send() shielded from cancellation. Hypercorn closes a
    ``Connection: close`` (or HTTP/1.0) connection from inside the app's last send(), after
    telling the app the client is gone; quart-trio then cancels the request task, cancelling
    the close too, and the connection stayed open (a client reading to EOF hung)."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        async def shielded_send(message: Any) -> None:
            with trio.CancelScope(shield=True):
                await send(message)

        await app(scope, receive, shielded_send)

    return asgi
