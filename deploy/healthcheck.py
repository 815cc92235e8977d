"""The image's health check: GET each URL given (default: $NSQ_HEALTH_URL, else nsqd's
http://127.0.0.1:4151/ping); healthy (exit 0) when every one answers 200, else exit 1 with one
line saying which did not. The daemons' /ping answers "OK" while they serve."""

import os
import sys
import urllib.request

urls = sys.argv[1:] or [os.environ.get("NSQ_HEALTH_URL", "http://127.0.0.1:4151/ping")]
for url in urls:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            if answer.status != 200:
                sys.exit(f"unhealthy: {url} answered {answer.status}")
    except OSError as exc:
        sys.exit(f"unhealthy: {url}: {exc}")
