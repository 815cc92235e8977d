"""nsqlookupd discovery: ``GET /lookup?topic=`` on each lookupd (docs/protocol.md §6.3, §12), the
producers' ``broadcast_address:tcp_port`` collected. A 404 (topic not known yet) is no
producers."""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterable

import httpx

from ..goerrors import http_error

__all__ = ["lookup_producers", "lookup_url", "query_lookupds"]

log = logging.getLogger("trionsq.client")


def lookup_url(address: str) -> str:
    """The lookup endpoint of a lookupd given as ``host:port`` or an ``http(s)://`` URL."""
    if "://" not in address:
        address = "http://" + address
    return address.rstrip("/") + "/lookup"


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _lookup_endpoint(lookupd: str, topic: str) -> str:
    """go-nsq's lookup URL: ``http://host:port/lookup?topic=T``."""
    return f"{lookup_url(lookupd)}?{urllib.parse.urlencode({'topic': topic})}"


async def lookup_producers(client: httpx.AsyncClient, lookupd: str, topic: str) -> set[str]:
    """The nsqd TCP addresses producing `topic` according to one lookupd."""
    response = await client.get(
        _lookup_endpoint(lookupd, topic),
        headers={"Accept": "application/vnd.nsq; version=1.0"},
    )
    if response.status_code == 404:
        return set()
    response.raise_for_status()
    body = response.json()
    data = body.get("data", body) if isinstance(body, dict) else {}
    out = set()
    for producer in data.get("producers") or []:
        host = producer.get("broadcast_address") or producer.get("address")
        port = producer.get("tcp_port")
        if host and port:
            out.add(_host_port(host, int(port)))
    return out


async def query_lookupds(
    client: httpx.AsyncClient, lookupds: Iterable[str], topic: str
) -> set[str]:
    """The union over every lookupd that answers; failures are logged (go-nsq's ``error
    querying nsqlookupd (URL) - Get "URL": dial tcp ...``) and skipped."""
    found: set[str] = set()
    for lookupd in lookupds:
        try:
            found |= await lookup_producers(client, lookupd, topic)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            endpoint = _lookup_endpoint(lookupd, topic)
            reason = http_error(endpoint, exc) if isinstance(exc, httpx.TransportError) else exc
            log.error("error querying nsqlookupd (%s) - %s", endpoint, reason)
    return found
