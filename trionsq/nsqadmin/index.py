"""The single-page app's files: `render_index` fills ``index.html``'s two placeholders
(``{{BASE_PATH}}`` and ``{{NSQADMIN_CONFIG}}``, the config as JSON safe inside ``<script>``),
`find_static` resolves ``/static/<path>`` and ``/fonts/<asset>`` inside the static folder (nothing
outside it), `content_type` gives each file's Content-Type."""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_STATIC_DIR",
    "PLACEHOLDER_INDEX",
    "base_prefix",
    "content_type",
    "find_static",
    "index_config",
    "render_index",
    "script_json",
]

#: The frontend's folder (``trionsq/nsqadmin/static``).
DEFAULT_STATIC_DIR = Path(__file__).resolve().parent / "static"

#: Served when ``index.html`` is missing (the frontend is not installed / not written yet).
PLACEHOLDER_INDEX = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>nsqadmin</title></head>
<body>
<h1>nsqadmin</h1>
<p>The web interface is not installed (no <code>index.html</code> in the static folder).
The JSON API is available under <a href="{{BASE_PATH}}/api/topics">{{BASE_PATH}}/api/topics</a>.</p>
<script>window.NSQADMIN = {{NSQADMIN_CONFIG}};</script>
</body>
</html>
"""

# Types Python's mimetypes may not know (Go's staticAssetHandler has the same fallbacks).
_EXTRA_TYPES = {
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".ttf": "font/ttf",
    ".eot": "application/vnd.ms-fontobject",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".html": "text/html",
    ".ico": "image/x-icon",
    ".png": "image/png",
}


def base_prefix(base_path: str) -> str:
    """The (normalised) base path without its trailing slash: ``""`` for ``/``."""
    return base_path.rstrip("/")


def script_json(value: Any) -> str:
    """JSON that can sit inside an inline ``<script>``: ``<``, ``>``, ``&`` and the JavaScript
    line terminators U+2028/U+2029 written as ``\\uXXXX`` escapes."""
    text = json.dumps(value, separators=(",", ":"))
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def index_config(
    *,
    version: str,
    base: str,
    is_admin: bool,
    lookupd: list[str],
    nsqd: list[str],
    graphite_url: str,
    proxy_graphite: bool,
    statsd_interval: float,
    statsd_prefix: str,
    statsd_counter_format: str,
    statsd_gauge_format: str,
    acl_http_header: str,
) -> dict[str, Any]:
    """The ``{{NSQADMIN_CONFIG}}`` object (see docs/nsqadmin.md for the contract)."""
    return {
        "version": version,
        "basePath": base,
        "isAdmin": is_admin,
        "nsqlookupd": list(lookupd),
        "nsqdAddresses": list(nsqd),
        "graphEnabled": bool(graphite_url),
        "statsdInterval": int(statsd_interval),
        "graphiteUrl": graphite_url,
        "proxyGraphite": proxy_graphite,
        "statsdPrefix": statsd_prefix,
        "statsdCounterFormat": statsd_counter_format,
        "statsdGaugeFormat": statsd_gauge_format,
        "aclHttpHeader": acl_http_header,
    }


def render_index(template: str, base: str, config: dict[str, Any]) -> str:
    """``index.html`` with ``{{BASE_PATH}}`` -> `base` and ``{{NSQADMIN_CONFIG}}`` -> the
    config as script-safe JSON (literal substitutions, in one pass so neither value is
    re-scanned)."""
    config_text = script_json(config)
    parts = template.split("{{NSQADMIN_CONFIG}}")
    return config_text.join(part.replace("{{BASE_PATH}}", base) for part in parts)


def find_static(static_dir: Path, name: str) -> Path | None:
    """The file `name` (a relative path, ``/``-separated) under `static_dir`, or None when it
    is missing, not a regular file, or would lie outside the folder (``..``, absolute paths,
    symlinks out)."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return None
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    root = static_dir.resolve()
    try:
        candidate = root.joinpath(*parts).resolve()
    except (OSError, RuntimeError):
        return None
    if not candidate.is_relative_to(root) or not candidate.is_file():
        return None
    return candidate


def content_type(name: str) -> str:
    """The Content-Type for a static file; text types with ``charset=utf-8``."""
    suffix = Path(name).suffix.lower()
    kind = _EXTRA_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in ("application/json", "image/svg+xml"):
        kind += "; charset=utf-8"
    return kind
