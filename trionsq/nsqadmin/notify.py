"""Admin-action notifications (Go's notify.go): `admin_action` builds the JSON Go POSTs to
``--notification-http-endpoint``; `Notifier` queues them on a bounded Trio memory channel so a
request never waits, and one task in the daemon's nursery POSTs them in order."""

from __future__ import annotations

import base64
import binascii
import logging
import socket
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from ..http_common import go_json

__all__ = ["ACTIONS", "Notifier", "admin_action", "basic_auth_user"]

log = logging.getLogger("trionsq.nsqadmin")

#: Every action name nsqadmin notifies.
ACTIONS = frozenset(
    {
        "create_topic",
        "create_channel",
        "delete_topic",
        "delete_channel",
        "pause_topic",
        "unpause_topic",
        "pause_channel",
        "unpause_channel",
        "empty_topic",
        "empty_channel",
        "tombstone_topic_producer",
    }
)

#: How many notifications may wait for the sender before new ones are dropped (Go parks one
#: goroutine per pending notification instead, without limit).
QUEUE_SIZE = 1024


def basic_auth_user(authorization: str) -> str:
    """The user name of an ``Authorization: Basic ...`` header, ``""`` otherwise."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme != "Basic" or not encoded:
        return ""
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""
    user, sep, _ = decoded.partition(":")
    return user if sep else ""


def admin_action(
    action: str,
    topic: str,
    channel: str = "",
    node: str = "",
    *,
    headers: Mapping[str, str],
    remote_addr: str,
    path: str,
    query: str,
    tls: bool,
    timestamp: int,
    via: str | None = None,
) -> dict[str, Any]:
    """Go's AdminAction in its field order (``channel``, ``node``, ``user`` omitted when
    empty): ``url`` is rebuilt from the Host header, path and query (``https`` when the request
    came over TLS or with ``X-Scheme: https``); ``remote_ip`` is the peer's ``ip:port``."""
    scheme = "https" if tls or headers.get("X-Scheme", "") == "https" else "http"
    url = f"{scheme}://{headers.get('Host', '')}{path}"
    if query:
        url += f"?{query}"
    payload: dict[str, Any] = {"action": action, "topic": topic}
    if channel:
        payload["channel"] = channel
    if node:
        payload["node"] = node
    payload["timestamp"] = timestamp
    user = basic_auth_user(headers.get("Authorization", ""))
    if user:
        payload["user"] = user
    payload["remote_ip"] = remote_addr
    payload["user_agent"] = headers.get("User-Agent", "")
    payload["url"] = url
    payload["via"] = socket.gethostname() if via is None else via
    return payload


class Notifier:
    """Queue of admin actions and the task that POSTs them to the endpoint."""

    def __init__(self, queue_size: int = QUEUE_SIZE) -> None:
        self._send, self._receive = trio.open_memory_channel[dict[str, Any]](queue_size)
        self.dropped = 0

    def notify(self, payload: dict[str, Any]) -> None:
        """Queue `payload` without waiting; when the queue is full it is dropped (logged)."""
        try:
            self._send.send_nowait(payload)
        except trio.WouldBlock:
            self.dropped += 1
            log.error("notification queue full, dropping %s notification", payload["action"])
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def run(
        self,
        endpoint: str,
        connect_timeout: float,
        request_timeout: float,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """POST each queued action to `endpoint` as JSON, one at a time, until cancelled."""
        timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            task_status.started()
            async for payload in self._receive:
                log.info("POSTing notification to %s", endpoint)
                body = go_json(payload)
                try:
                    with trio.fail_after(request_timeout):
                        await client.post(
                            endpoint,
                            content=body,
                            headers={"Content-Type": "application/json"},
                        )
                except (httpx.HTTPError, trio.TooSlowError, OSError) as exc:
                    log.error("failed to POST notification - %s", exc or type(exc).__name__)
