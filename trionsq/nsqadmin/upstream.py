"""nsqadmin's HTTP client to nsqd and nsqlookupd (Go's ``http_api.Client`` GETV1/POSTV1): one
shared httpx client on Trio, Go's connect and whole-request timeouts, the 403 -> HTTPS retry, and
every failure turned into an `UpstreamError` that names the node and says what went wrong in
plain words (and in a Go-like sentence for the ``message`` text)."""

from __future__ import annotations

import contextvars
import errno
import json
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import trio

from trionsq.options import format_duration

log = logging.getLogger("trionsq.nsqadmin")

__all__ = ["UpstreamClient", "UpstreamError", "build_ssl_context", "gather", "quiet_upstream"]

T = TypeVar("T")

_ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}

#: True in a task whose requests should not log Go's ``CI: querying`` line each time (the
#: chart history's sampling, `history.History.run`: not a user's request).
quiet_upstream: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "quiet_upstream", default=False
)
_BODY_PREVIEW = 200


class UpstreamError(Exception):
    """One upstream (``address``) that failed: ``words`` in plain words (the ``errors``
    extension), ``go_text`` as Go's client would phrase it (the ``message`` text)."""

    def __init__(self, address: str, words: str, go_text: str) -> None:
        super().__init__(go_text)
        self.address = address
        self.words = words
        self.go_text = go_text

    def to_json(self) -> dict[str, str]:
        return {"address": self.address, "error": self.words}


def _seconds(value: float) -> str:
    return format_duration(round(value * 1_000_000_000))


def _os_error(exc: BaseException) -> OSError | None:
    """The most specific OSError behind `exc` (one with an errno, or a gaierror), following
    causes, contexts and exception groups (trio's "all attempts to connect ... failed")."""
    fallback: OSError | None = None
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError):
            if current.errno is not None or isinstance(current, socket.gaierror):
                return current
            fallback = fallback or current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
    return fallback


def _transport_words(exc: httpx.HTTPError, connect_timeout: float) -> str:
    """A transport failure in plain words."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timed out after {_seconds(connect_timeout)}"
    os_error = _os_error(exc)
    if isinstance(os_error, socket.gaierror):
        return "no such host"
    if os_error is not None:
        if os_error.errno == errno.ECONNREFUSED:
            return "connection refused"
        if os_error.errno == errno.ECONNRESET:
            return "connection reset by peer"
        if os_error.strerror:
            return os_error.strerror.lower()
    if isinstance(exc, httpx.RemoteProtocolError):
        return "connection closed before a full answer"
    if isinstance(exc, ssl.SSLError | httpx.ConnectError) and "SSL" in str(exc):
        return f"TLS error: {exc}"
    return str(exc) or type(exc).__name__


def _go_quote(data: bytes) -> str:
    """Go's %q of a body (enough of it for an error message)."""
    return json.dumps(data.decode("utf-8", "replace"))


def build_ssl_context(
    insecure_skip_verify: bool, root_ca_file: str, cert: str, key: str
) -> ssl.SSLContext:
    """The client TLS configuration of Go's nsqadmin: verification (or not), a root CA file,
    a client certificate. Raises `OSError`/`ssl.SSLError` with the file at fault."""
    context = ssl.create_default_context()
    if insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if root_ca_file:
        context.load_verify_locations(cafile=root_ca_file)
    if cert and key:
        context.load_cert_chain(cert, key)
    return context


class UpstreamClient:
    """GET/POST to nsqd and nsqlookupd HTTP APIs with Go's V1 conventions and timeouts."""

    def __init__(
        self, client: httpx.AsyncClient, connect_timeout: float, request_timeout: float
    ) -> None:
        self.client = client
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        #: For ``/metrics``: requests by (upstream kind, ``ok``/``error``); errors by address.
        self.requests: Counter[tuple[str, str]] = Counter()
        self.errors: Counter[str] = Counter()

    @staticmethod
    def timeout(connect_timeout: float, request_timeout: float) -> httpx.Timeout:
        """The per-phase httpx timeouts matching Go's transport (the whole-request limit is
        enforced separately)."""
        return httpx.Timeout(request_timeout, connect=connect_timeout)

    async def get_json(self, address: str, path: str, ci: str = "") -> Any:
        """GET ``http://<address><path>`` and decode the JSON answer. `ci` names the kind of
        daemon asked (``nsqlookupd``, ``nsqd``) for Go's ``CI: querying`` line."""
        body = await self._request("GET", address, path, ci=ci)
        try:
            return json.loads(body)
        except ValueError:
            url = f"http://{address}{path}"
            raise UpstreamError(
                address, "invalid JSON answer", f'Get "{url}": invalid JSON answer'
            ) from None

    async def get_text(self, address: str, path: str, ci: str = "") -> str:
        """GET and return the body as text (``/ping``)."""
        return (await self._request("GET", address, path, ci=ci)).decode("utf-8", "replace")

    async def post(self, address: str, path: str, ci: str = "") -> None:
        """POST with no body (the admin actions: parameters are in the query string)."""
        await self._request("POST", address, path, ci=ci)

    async def get_url_json(self, url: str) -> Any:
        """GET a full URL (graphite) and decode the JSON answer."""
        address = urlsplit(url).netloc
        body = await self._request("GET", address, "", url=url)
        try:
            return json.loads(body)
        except ValueError:
            raise UpstreamError(
                address, "invalid JSON answer", f'Get "{url}": invalid JSON answer'
            ) from None

    async def _request(
        self, method: str, address: str, path: str, url: str = "", ci: str = ""
    ) -> bytes:
        kind = ci or ("graphite" if url else "other")
        try:
            body = await self._exchange(method, address, path, url, ci)
        except UpstreamError:
            self.requests[(kind, "error")] += 1
            self.errors[address] += 1
            raise
        self.requests[(kind, "ok")] += 1
        return body

    async def _exchange(self, method: str, address: str, path: str, url: str, ci: str) -> bytes:
        url = url or f"http://{address}{path}"
        if ci and not quiet_upstream.get():
            log.info("CI: querying %s %s", ci, url)  # Go's ClusterInfo, before each request
        verb = method.capitalize()
        with trio.move_on_after(self.request_timeout) as scope:
            for _ in range(2):
                try:
                    response = await self.client.request(method, url, headers=_ACCEPT)
                except httpx.HTTPError as exc:
                    words = _transport_words(exc, self.connect_timeout)
                    raise UpstreamError(address, words, f'{verb} "{url}": {words}') from None
                if response.status_code == 200:
                    return response.content
                if response.status_code == 403 and url.startswith("http:"):
                    https = _https_url(url, response.content)
                    if https is not None:
                        url = https
                        continue
                body = response.content
                preview = body.decode("utf-8", "replace").strip()[:_BODY_PREVIEW]
                words = (
                    f"HTTP {response.status_code}: {preview}"
                    if preview
                    else (f"HTTP {response.status_code}")
                )
                reason = response.reason_phrase
                raise UpstreamError(
                    address,
                    words,
                    f"got response {response.status_code} {reason} {_go_quote(body)}",
                )
        assert scope.cancelled_caught
        words = f"timed out after {_seconds(self.request_timeout)}"
        raise UpstreamError(address, words, f'{verb} "{url}": {words}')


def _https_url(url: str, body: bytes) -> str | None:
    """Go's httpsEndpoint: a 403 naming an ``https_port`` is retried over HTTPS there."""
    try:
        port = json.loads(body).get("https_port")
    except (ValueError, AttributeError):
        return None
    if not isinstance(port, int) or isinstance(port, bool) or port <= 0:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(("https", netloc, parts.path, parts.query, ""))


async def gather(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | UpstreamError]:
    """Run `calls` concurrently; each result, or the `UpstreamError` it raised, in order."""
    results: list[T | UpstreamError] = [UpstreamError("", "", "")] * len(calls)

    async def run(index: int, call: Callable[[], Awaitable[T]]) -> None:
        try:
            results[index] = await call()
        except UpstreamError as err:
            results[index] = err

    async with trio.open_nursery() as nursery:
        for index, call in enumerate(calls):
            nursery.start_soon(run, index, call)
    return results
