"""HTTP requests counted by route and status for a daemon's ``/metrics`` (nsqlookupd's and
nsqadmin's): a Quart ``after_request`` hook. The route is the matched rule (``/lookup``,
``/api/topics/<topic>``), never the raw path, so a scan of random URLs adds one label value
(``unmatched``), not one per URL."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from trionsq.prometheus_text import family

__all__ = ["RequestCounts"]


class RequestCounts:
    """Requests answered, by (route, status code)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()

    def install(self, app: Any) -> None:
        """Count every response `app` (a Quart app) sends, error pages included."""
        from quart import request

        async def count(response: Any) -> Any:
            rule = request.url_rule
            self.counts[(rule.rule if rule is not None else "unmatched", response.status_code)] += 1
            return response

        app.after_request(count)

    def lines(self, name: str, help_text: str) -> Iterator[str]:
        """The counts as the counter family `name`, labels ``route`` and ``code``."""
        samples = [
            ((("route", route), ("code", str(code))), n)
            for (route, code), n in sorted(self.counts.items())
        ]
        yield from family(name, "counter", help_text, samples)
