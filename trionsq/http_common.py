"""The HTTP plumbing every trionsq daemon's API shares (Go NSQ's ``internal/http_api``): Go-style
responses and errors, Go's query-string parsing, request-body handling as Go's net/http does it,
the route decorator, and serving a quart-trio app with hypercorn inside a Trio nursery.

Responses follow Go's ``RespondV1``: every answer but ``/ping``'s carries
``X-NSQ-Content-Type: nsq; version=1.0``; a string answers as text, ``None`` as an empty body, a
value as JSON, an error as ``{"message": "<TEXT>"}`` with its status. Unknown paths answer
404 ``NOT_FOUND``, a known path with the wrong method 405 ``METHOD_NOT_ALLOWED`` (with
httprouter's ``Allow`` header), an exception 500 ``INTERNAL_ERROR``.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote_plus

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, g, request
from quart_trio import QuartTrio

__all__ = [
    "JSON_CONTENT_TYPE",
    "MAX_DISCARD",
    "NSQ_CONTENT_TYPE",
    "HTTPError",
    "Handler",
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

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
        if b";" in part or _BAD_ESCAPE.search(part):
            raise HTTPError(400, "INVALID_REQUEST")
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


def new_app(name: str, log: logging.Logger) -> QuartTrio:
    """A quart-trio app with Go's 404/405/500 answers and its body handling; errors are
    logged on `log`."""
    # No Quart static route: it would answer /static/<file> from the package's folder before
    # nsqadmin's own route (which honours --dev-static-dir and Go's plain-text 404).
    app = QuartTrio(name, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = None  # limits are the daemon's, checked per route
    app.after_request(discard_body)

    @app.errorhandler(404)
    async def not_found(_: Exception) -> Response:
        return respond("NOT_FOUND", 404)

    @app.errorhandler(405)
    async def method_not_allowed(err: Exception) -> Response:
        response = respond("METHOD_NOT_ALLOWED", 405)
        valid = getattr(err, "valid_methods", None)
        if valid:
            # httprouter's Allow: the path's methods (no implicit HEAD) and OPTIONS, sorted.
            allowed = (set(valid) - {"HEAD"}) | {"OPTIONS"}
            response.headers["Allow"] = ", ".join(sorted(allowed))
        return response

    @app.errorhandler(Exception)
    async def internal_error(err: Exception) -> Response:
        log.exception("HTTP: internal error - %s", err)
        return respond("INTERNAL_ERROR", 500)

    return app


def v1_route(app: QuartTrio, path: str, methods: list[str]) -> Callable[[Handler], Handler]:
    """Register a handler under Go's V1 decorator: its return value goes through `respond`,
    an `HTTPError` it raises answers with that status and message."""

    def register(handler: Handler) -> Handler:
        async def endpoint(**kwargs: Any) -> Response:
            try:
                return respond(await handler(**kwargs))
            except HTTPError as err:
                return respond(err.message, err.status)

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
