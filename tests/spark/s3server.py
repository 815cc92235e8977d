"""moto's S3 server for the S3 staging store's tests: in a thread of the test process, on
127.0.0.1 and a kernel-chosen port, with the requests it served recorded.

moto checks ``If-None-Match: *`` and then writes the object in two steps, and its server is
threaded, so two concurrent conditional PUTs of one key could both succeed (S3 makes them
atomic: one 412s). The server here serves one request at a time, which makes them atomic."""

from __future__ import annotations

import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

#: What boto3 needs besides the endpoint (moto takes any credentials).
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class _Handler(MotoRequestHandler):
    def log_request(self, *args: Any) -> None:
        pass  # werkzeug logs every request on stderr; errors are still logged


class S3Server:
    """Use as a context manager: `endpoint`, `env` (for boto3 in any process), `client()`,
    `new_bucket()`, `keys(bucket)`, and `requests` (method, path, If-None-Match header)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)

        def serialized(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            with self._lock:
                self.requests.append(
                    (
                        environ["REQUEST_METHOD"],
                        environ.get("PATH_INFO", ""),
                        environ.get("HTTP_IF_NONE_MATCH"),
                    )
                )
                response = app(environ, start_response)
                try:
                    return list(response)
                finally:
                    if hasattr(response, "close"):
                        response.close()

        self._server = make_server(
            "127.0.0.1", 0, serialized, threaded=True, request_handler=_Handler
        )
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, **CREDENTIALS}
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> S3Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            # moto's backends are the process's: forget this server's buckets.
            request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
            urllib.request.urlopen(request, timeout=10).close()
        finally:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def new_bucket(self) -> str:
        bucket = f"trionsq-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def put_requests(requests: Iterable[tuple[str, str, str | None]]) -> list[tuple[str, str | None]]:
    """(path, If-None-Match) of the PUTs among `requests`."""
    return [(path, match) for method, path, match in requests if method == "PUT"]
