"""`NSQAdmin`: the daemon and its nursery tree.

```
NSQAdmin.run()  root nursery
 ├─ HTTP server (hypercorn): pages, static files, JSON API, actions, /config
 └─ notification sender (only with --notification-http-endpoint)
```
One httpx client (Trio backend) is shared by every request to nsqd and nsqlookupd. The options
are read per request (``PUT /config/...`` swaps them), so `NSQAdmin.options` is the live value.
"""

from __future__ import annotations

import functools
import logging
import ssl
from pathlib import Path
from typing import Any

import httpx
import trio

from ..daemon import StartupError, start_http
from ..goerrors import key_pair_error, open_error
from ..request_counts import RequestCounts
from ..version import build_description
from .cluster import ClusterInfo, Report
from .history import History
from .http_api import serve_http
from .index import DEFAULT_STATIC_DIR
from .notify import Notifier
from .options import NSQAdminOptions
from .upstream import UpstreamClient, build_ssl_context

__all__ = ["NSQAdmin"]

log = logging.getLogger("trionsq.nsqadmin")


def _client_ssl_context(options: NSQAdminOptions) -> ssl.SSLContext:
    """Go's httpClientTLSConfig, with Go's startup error texts (``failed to instantiate
    nsqadmin - failed to LoadX509KeyPair ...``)."""
    failed = "failed to instantiate nsqadmin -"
    try:
        context = build_ssl_context(options.http_client_tls_insecure_skip_verify, "", "", "")
    except (OSError, ssl.SSLError) as exc:  # pragma: no cover - no files involved
        raise StartupError(f"{failed} {exc}") from None
    cert, key = options.http_client_tls_cert, options.http_client_tls_key
    if cert and key:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            reason = key_pair_error(cert, key) or exc
            raise StartupError(
                f"{failed} failed to LoadX509KeyPair {cert}, {key} - {reason}"
            ) from None
    ca_file = options.http_client_tls_root_ca_file
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except ssl.SSLError:
            raise StartupError(f"{failed} failed to AppendCertsFromPEM {ca_file}") from None
        except OSError as exc:  # the file cannot be read
            reason = open_error(ca_file, exc)
            raise StartupError(
                f"{failed} failed to read TLS root CA file {ca_file} - {reason}"
            ) from None
    return context


class NSQAdmin:
    """One nsqadmin: `run` serves until `request_exit`."""

    def __init__(self, options: NSQAdminOptions, static_dir: Path | None = None) -> None:
        """`options` must be validated; `static_dir` overrides the frontend's folder
        (``--dev-static-dir`` does too)."""
        self.options = options
        if static_dir is None:
            static_dir = Path(options.dev_static_dir) if options.dev_static_dir else None
        self.static_dir = static_dir or DEFAULT_STATIC_DIR
        self.notifier = Notifier()
        #: HTTP requests answered (the UI's API calls among them), by route and status.
        self.requests = RequestCounts()
        #: The charts' last hour of each topic and channel (history.py).
        self.history = History(options.history_interval)
        self._cluster: ClusterInfo | None = None
        #: The bound ``(host, port)`` of the HTTP listener, once `run` has started.
        self.http_address: tuple[str, int] | None = None
        self._exit = trio.Event()
        self._exited = trio.Event()

    @property
    def cluster(self) -> ClusterInfo:
        assert self._cluster is not None, "NSQAdmin is not running"
        return self._cluster

    @property
    def http_port(self) -> int:
        return self.http_address[1] if self.http_address else 0

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, serve until `request_exit`, then stop."""
        opts = self.options
        context = _client_ssl_context(opts)
        log.info("%s", build_description("nsqadmin"))
        timeout = UpstreamClient.timeout(
            opts.http_client_connect_timeout, opts.http_client_request_timeout
        )
        try:
            async with (
                httpx.AsyncClient(timeout=timeout, verify=context, trust_env=False) as client,
                trio.open_nursery() as nursery,
            ):
                upstream = UpstreamClient(
                    client, opts.http_client_connect_timeout, opts.http_client_request_timeout
                )
                self._cluster = ClusterInfo(upstream, lambda: self.options)
                await self._start_http(nursery)
                if opts.history_interval > 0 and not opts.graphite_url:
                    nursery.start_soon(self.history.run, self._cluster, Report, name="history")
                shown = opts.http_address
                if self.http_address is not None:
                    host, port = self.http_address
                    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                    log.info("HTTP: listening on %s", shown)
                if opts.notification_http_endpoint:
                    await nursery.start(
                        functools.partial(
                            self.notifier.run,
                            opts.notification_http_endpoint,
                            opts.http_client_connect_timeout,
                            opts.http_client_request_timeout,
                        ),
                        name="notifications",
                    )
                task_status.started(self)
                await self._exit.wait()
                log.info("HTTP: closing %s", shown)
                nursery.cancel_scope.cancel()
        finally:
            self._exited.set()

    async def _start_http(self, nursery: trio.Nursery) -> None:
        self.http_address = await start_http(
            nursery, functools.partial(serve_http, self), self.options.http_address, "nsqadmin"
        )

    def request_exit(self) -> None:
        """Begin the shutdown (idempotent)."""
        self._exit.set()

    async def wait_exited(self) -> None:
        await self._exited.wait()
