"""pynsq with ``auth_secret`` against trionsq nsqd and an auth server (docs/protocol.md §9): a
secret the server grants publishes and consumes; one it refuses gets no message through."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from trionsq.testing import DaemonProcess, pythonpath_env

CLIENT = Path(__file__).parent / "clients" / "pynsq_auth_client.py"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nsq") is None, reason="pynsq is not installed"
)


class _Auth(BaseHTTPRequestHandler):
    secrets: dict[str, dict] = {
        "good": {
            "ttl": 60,
            "identity": "pynsq-user",
            "authorizations": [
                {"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe"]}
            ],
        }
    }

    def do_GET(self) -> None:
        secret = parse_qs(urlsplit(self.path).query).get("secret", [""])[0]
        reply = self.secrets.get(secret)
        body = json.dumps(reply or {"message": "denied"}).encode()
        self.send_response(200 if reply else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def auth_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Auth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run(daemon: DaemonProcess, secret: str, timeout: float) -> dict:
    host, port = daemon.tcp_address
    topic = f"auth_{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(
        [sys.executable, str(CLIENT), f"{host}:{port}", topic, "20", str(timeout), secret],
        capture_output=True,
        text=True,
        timeout=40,
        env=pythonpath_env(),
        stdin=subprocess.DEVNULL,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result; stderr:\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1])


def test_pynsq_publishes_and_consumes_with_a_granted_secret(auth_server: str) -> None:
    with DaemonProcess(
        "nsqd", args=[f"--auth-http-address={auth_server}"], env=pythonpath_env()
    ) as daemon:
        result = run(daemon, "good", timeout=15)
        assert result["ok"], result["errors"]
        assert len(result["received"]) == 20


def test_pynsq_with_a_refused_secret_gets_nothing_through(auth_server: str) -> None:
    with DaemonProcess(
        "nsqd", args=[f"--auth-http-address={auth_server}"], env=pythonpath_env()
    ) as daemon:
        result = run(daemon, "bad", timeout=3)
        assert not result["ok"]
        assert result["received"] == []
        log = "".join(daemon.stderr_lines)
        assert "AUTH failed" in log
