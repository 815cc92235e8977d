"""nsqadmin's ``/metrics`` (beyond NSQ): the requests it answered (its UI's ``/api`` calls
among them) by route and status, and its own calls to nsqlookupd, nsqd and graphite, how
many failed and on which address, in the Prometheus text format with the standard
``process_`` metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from trionsq import NSQ_VERSION
from trionsq.prometheus_text import family, render

if TYPE_CHECKING:
    from .nsqadmin import NSQAdmin

__all__ = ["render_metrics"]


def _upstream_lines(admin: NSQAdmin) -> Iterator[str]:
    client = admin.cluster.client
    yield from family(
        "nsqadmin_upstream_requests_total",
        "counter",
        "Requests nsqadmin made to the cluster, by upstream (nsqlookupd, nsqd, graphite) "
        "and outcome (ok, error).",
        [
            ((("upstream", kind), ("outcome", outcome)), n)
            for (kind, outcome), n in sorted(client.requests.items())
        ],
    )
    yield from family(
        "nsqadmin_upstream_errors_total",
        "counter",
        "Failed requests to the cluster, by the address asked.",
        [((("address", address),), n) for address, n in sorted(client.errors.items())],
    )


def render_metrics(admin: NSQAdmin) -> str:
    """The text-format body of nsqadmin's ``/metrics``."""
    lines = [
        *family(
            "nsqadmin_build_info",
            "gauge",
            "nsqadmin version, always 1.",
            [((("version", NSQ_VERSION),), 1)],
        ),
        *admin.requests.lines(
            "nsqadmin_http_requests_total", "HTTP requests answered, by route and status."
        ),
        *_upstream_lines(admin),
    ]
    return render(lines)
