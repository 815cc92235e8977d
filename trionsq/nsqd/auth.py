"""AUTH (docs/protocol.md §9): asking the auth servers (``--auth-http-address``) what a
client's secret allows, and checking PUB/MPUB/DPUB/SUB against the answer.

nsqd asks the servers in a random rotation until one answers 200 with a valid reply; the reply's
``ttl`` says how long it holds, after which the next check asks again. An authorization allows a
(topic, channel) when it has the permission (``subscribe`` for SUB, ``publish`` for publishes,
whose channel is ``""``), its topic regex matches the topic and one of its channel regexes
matches the channel (Go's regexp.MatchString: an unanchored search).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    import httpx

PERMISSIONS = ("subscribe", "publish")


class AuthError(Exception):
    """No auth server gave a valid answer (the client gets ``E_AUTH_FAILED``)."""


@dataclass(frozen=True)
class Authorization:
    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def allows(self, topic: str, channel: str) -> bool:
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions or not self.topic.search(topic):
            return False
        return any(pattern.search(channel) for pattern in self.channels)


@dataclass
class AuthState:
    """One client's answer from the auth server, valid until `expires` (trio time)."""

    identity: str
    identity_url: str
    authorizations: list[Authorization] = field(default_factory=list)
    expires: float = 0.0

    def allows(self, topic: str, channel: str) -> bool:
        return any(a.allows(topic, channel) for a in self.authorizations)

    @property
    def expired(self) -> bool:
        return self.expires <= trio.current_time()


@dataclass(frozen=True)
class AuthRequest:
    """What nsqd tells the auth server about the client."""

    remote_ip: str
    tls: bool
    secret: str
    common_name: str

    def params(self) -> dict[str, str]:
        return {
            "remote_ip": self.remote_ip,
            "tls": "true" if self.tls else "false",
            "secret": self.secret,
            "common_name": self.common_name,
        }


def parse_reply(data: Any) -> AuthState:
    """Validate an auth server's JSON reply as Go's nsqd does; raises AuthError."""
    if not isinstance(data, dict):
        raise AuthError("reply is not a JSON object")
    ttl = data.get("ttl", 0)
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        raise AuthError(f"invalid TTL {ttl!r}")
    authorizations = []
    for raw in data.get("authorizations") or []:
        if not isinstance(raw, dict):
            raise AuthError("authorization is not a JSON object")
        permissions = raw.get("permissions") or []
        for permission in permissions:
            if permission not in PERMISSIONS:
                raise AuthError(f"unknown permission {permission}")
        topic = str(raw.get("topic", ""))
        try:
            topic_re = re.compile(topic)
        except re.error as err:
            raise AuthError(f"unable to compile topic {topic!r} {err}") from None
        channels = []
        for channel in raw.get("channels") or []:
            try:
                channels.append(re.compile(str(channel)))
            except re.error as err:
                raise AuthError(f"unable to compile channel {channel!r} {err}") from None
        authorizations.append(Authorization(topic_re, tuple(channels), frozenset(permissions)))
    if ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(
        identity=str(data.get("identity", "")),
        identity_url=str(data.get("identity_url", "")),
        authorizations=authorizations,
        expires=trio.current_time() + ttl,
    )


async def query_any(
    addresses: Sequence[str],
    request: AuthRequest,
    *,
    method: str = "get",
    connect_timeout: float = 2.0,
    request_timeout: float = 5.0,
    verify: Any = True,
) -> AuthState:
    """Ask the auth servers, starting at a random one, until one gives a valid answer."""
    errors = []
    start = random.randrange(len(addresses))
    import httpx  # when first needed: nsqd without --auth-http-address starts without it

    timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
    async with httpx.AsyncClient(timeout=timeout, verify=verify) as client:
        for i in range(len(addresses)):
            address = addresses[(start + i) % len(addresses)]
            try:
                return await _query(client, address, request, method)
            except (AuthError, httpx.HTTPError, ValueError) as err:
                errors.append(f"failed to auth against {address} - {err}")
    raise AuthError("; ".join(errors))


async def _query(
    client: httpx.AsyncClient, address: str, request: AuthRequest, method: str
) -> AuthState:
    endpoint = address if "://" in address else f"http://{address}/auth"
    headers = {"Accept": "application/vnd.nsq; version=1.0"}
    params = request.params()
    if method == "post":
        body = json.dumps({key: [value] for key, value in params.items()})
        headers["Content-Type"] = "application/json"
        response = await client.post(endpoint, content=body, headers=headers)
    else:
        response = await client.get(endpoint, params=params, headers=headers)
    if response.status_code != 200:
        raise AuthError(f"got response {response.status_code} {response.text!r}")
    return parse_reply(response.json())


def _layers(stream: object) -> list[object]:
    """A connection's stream and those it wraps (compression over TLS over the socket)."""
    layers: list[object] = []
    while stream is not None and len(layers) < 8:
        layers.append(stream)
        stream = next(
            (
                getattr(stream, name)
                for name in ("transport_stream", "inner", "_inner", "_stream")
                if getattr(stream, name, None) is not None
            ),
            None,
        )
    return layers


def is_tls(stream: object) -> bool:
    """Whether the connection was upgraded to TLS."""
    return any(isinstance(layer, trio.SSLStream) for layer in _layers(stream))


def tls_common_name(stream: object) -> str:
    """The CN of the client's TLS certificate, "" without TLS or a certificate."""
    for layer in _layers(stream):
        if isinstance(layer, trio.SSLStream):
            try:
                cert = layer.getpeercert()
            except (ValueError, trio.NeedHandshakeError):
                return ""
            for rdn in (cert or {}).get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        return str(value)
    return ""
