"""Regenerate docs/screenshots/*.png: start a trionsq cluster (nsqlookupd, two nsqds, nsqadmin)
with realistic sample traffic and consumers, let the live charts fill, and screenshot every page
at 1280x800 in Debian's Chromium.

    python -m tests.browser.screenshots [--out docs/screenshots] [--warmup 16]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import threading
import time
from pathlib import Path

from .cluster import Cluster, Nsqd, free_port
from .conftest import CHROMIUM_ARGS, VIEWPORT, chromium_executable

ROOT = Path(__file__).resolve().parents[2]
NSQD_ARGS = ("--e2e-processing-latency-percentile=0.5,0.95,0.99", "--mem-queue-size=400")


class WavePublisher:
    """Publishes to a topic at a rate that drifts like real traffic (a slow wave plus noise)."""

    def __init__(
        self, nodes: list[Nsqd], topic: str, base: float, swing: float, period: float
    ) -> None:
        self.nodes, self.topic = nodes, topic
        self.base, self.swing, self.period = base, swing, period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        owed = 0.0
        while not self._stop.wait(0.1):
            t = time.monotonic() - start
            rate = self.base + self.swing * math.sin(2 * math.pi * t / self.period)
            rate *= 0.85 + 0.3 * ((int(t * 10) * 7919) % 100) / 100
            owed += max(0.0, rate) * 0.1
            batch = int(owed)
            owed -= batch
            for i, node in enumerate(self.nodes):
                share = batch // len(self.nodes) + (1 if i < batch % len(self.nodes) else 0)
                with contextlib.suppress(Exception):
                    node.mpub(self.topic, share, b'{"id": 1, "kind": "sample"}')

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def build_traffic(cluster: Cluster) -> list[WavePublisher]:
    n1, n2 = cluster.nodes
    for node in (n1, n2):
        for channel in ("billing", "shipping", "analytics"):
            node.create_channel("orders", channel)
        node.create_channel("payments", "ledger")
        node.create_channel("clicks", "sessionizer")
        node.create_channel("audit_log", "archiver")
    n1.create_channel("thumbnails", "resizer")
    # A backlog: analytics has no consumer; audit_log is paused with messages queued.
    n1.mpub("orders", 1500)
    n2.mpub("orders", 900)
    n1.mpub("audit_log", 320)
    n1.post("/topic/pause", topic="audit_log")
    n2.post("/channel/pause", topic="clicks", channel="sessionizer")
    n2.mpub("clicks", 40)
    billing_ua = "billing-service/3.2.0 go-nsq/1.1.0"
    shipping_ua = "shipping-worker/1.4 pynsq/0.9.1"
    # (topic, channel, nsqds, client id, user agent, max in flight, other options)
    consumers: list[tuple[str, str, list[Nsqd], str, str, int, dict[str, bool]]] = [
        ("orders", "billing", [n1], "billing", billing_ua, 50, {"snappy": True}),
        ("orders", "billing", [n2], "billing", billing_ua, 50, {"snappy": True}),
        ("orders", "shipping", [n1, n2], "shipping", shipping_ua, 25, {"deflate": True}),
        ("orders", "shipping", [n1], "shipping-slow", shipping_ua, 8, {"hold": True}),
        ("payments", "ledger", [n1, n2], "ledger", "ledger/2.0 trionsq/0.1.0", 20, {}),
        (
            "clicks",
            "sessionizer",
            [n1, n2],
            "sessionizer",
            "sessionizer/0.7 trionsq/0.1.0",
            100,
            {},
        ),
        ("thumbnails", "resizer", [n1], "resizer", "resizer/5.1 go-nsq/1.1.0", 4, {}),
    ]
    for topic, channel, nodes, client_id, ua, max_in_flight, options in consumers:
        cluster.consumers.add(
            topic,
            channel,
            [node.tcp for node in nodes],
            user_agent=ua,
            max_in_flight=max_in_flight,
            client_id=client_id,
            **options,
        )
    return [
        WavePublisher([n1, n2], "orders", base=60, swing=35, period=11),
        WavePublisher([n1, n2], "payments", base=18, swing=10, period=7),
        WavePublisher([n1, n2], "clicks", base=240, swing=120, period=13),
        WavePublisher([n1], "thumbnails", base=6, swing=5, period=5),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", default=str(ROOT / "docs" / "screenshots"), help="where the PNGs go"
    )
    parser.add_argument(
        "--warmup", type=float, default=16.0, help="seconds of traffic before the shots"
    )
    parser.add_argument("--refresh", type=int, default=250, help="page polling interval (ms)")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    exe = chromium_executable()
    if not os.access(exe, os.X_OK):
        print(
            f"no Chromium at {exe} (apt-get install chromium, or set TRIONSQ_CHROMIUM)",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    cluster = Cluster(nodes=2, nsqd_args=NSQD_ARGS)
    publishers: list[WavePublisher] = []
    try:
        # Samples the charts' history every second from before the traffic starts, so that the
        # topic and channel pages' "Last hour" charts show the whole warm-up.
        admin = cluster.start_admin("--history-interval=1s")
        publishers = build_traffic(cluster)
        n1, n2 = cluster.nodes
        dead = f"127.0.0.1:{free_port()}"
        degraded = cluster.start_admin(
            f"--nsqd-http-address={n1.http}",
            f"--nsqd-http-address={n2.http}",
            f"--nsqd-http-address={dead}",
            lookupd=False,
        )
        shots = {
            "topics": admin.page("/topics", args.refresh),
            "topic": admin.page("/topics/orders", args.refresh),
            "channel": admin.page("/topics/orders/shipping", args.refresh),
            "nodes": admin.page("/nodes", args.refresh),
            "node": admin.page(f"/nodes/{n1.http}", args.refresh),
            "lookup": admin.page("/lookup", args.refresh),
            "counter": admin.page("/counter", args.refresh),
            "error": degraded.page("/topics/orders", args.refresh),
        }
        # Topics known only to nsqlookupd, for the lookup page.
        from .cluster import http

        for path in (
            "/channel/create?topic=invoices&channel=mailer",
            "/topic/create?topic=reports_nightly",
        ):
            http("POST", f"http://{cluster.lookupd_http}{path}", b"")

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport=VIEWPORT)
            pages = {}
            for name, url in shots.items():
                page = context.new_page()
                page.goto(url)
                pages[name] = page
            time.sleep(args.warmup)
            for name, page in pages.items():
                page.bring_to_front()
                page.wait_for_timeout(600)
                path = out / f"{name}.png"
                page.screenshot(path=str(path))
                print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
            browser.close()
    finally:
        for pub in publishers:
            pub.stop()
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
