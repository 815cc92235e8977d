"""A local trionsq cluster for the browser tests and the screenshot script: nsqlookupd, nsqds
registered with it, nsqadmin instances over it, HTTP helpers to publish and inspect, and
consumers (trionsq.client) running in a background Trio thread."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import trio

from trionsq.client import Consumer, Message
from trionsq.testing import DaemonProcess


def _addr(pair: tuple[str, int] | None) -> str:
    assert pair is not None
    return f"{pair[0]}:{pair[1]}"


def _http_address(proc: DaemonProcess, timeout: float = 10.0) -> str:
    """The daemon's HTTP address, waiting for its log line (it may follow the TCP one late)."""
    deadline = time.monotonic() + timeout
    while proc.http_address is None:
        if proc.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("no HTTP listener:\n" + "".join(proc.stderr_lines))
        time.sleep(0.02)
    return _addr(proc.http_address)


def http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One HTTP request; returns (status, body) for any status."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def get_json(url: str) -> Any:
    status, body = http("GET", url)
    assert status == 200, f"GET {url} -> {status} {body!r}"
    return json.loads(body)


class Nsqd:
    """One nsqd process and its HTTP helpers."""

    def __init__(self, lookupd_tcp: str | None, name: str, extra_args: Sequence[str] = ()) -> None:
        args = ["--broadcast-address=127.0.0.1", *extra_args]
        if lookupd_tcp:
            args.append(f"--lookupd-tcp-address={lookupd_tcp}")
        self.name = name
        self.proc = DaemonProcess("nsqd", args=args)
        self.http = _http_address(self.proc)
        self.tcp = _addr(self.proc.tcp_address)

    def pub(self, topic: str, body: bytes = b"hello") -> None:
        q = urllib.parse.urlencode({"topic": topic})
        status, text = http("POST", f"http://{self.http}/pub?{q}", body)
        assert status == 200, text

    def mpub(self, topic: str, count: int, body: bytes = b"message") -> None:
        if count <= 0:
            return
        q = urllib.parse.urlencode({"topic": topic})
        status, text = http("POST", f"http://{self.http}/mpub?{q}", b"\n".join([body] * count))
        assert status == 200, text

    def post(self, path: str, **params: str) -> None:
        q = urllib.parse.urlencode(params)
        status, text = http("POST", f"http://{self.http}{path}?{q}", b"")
        assert status == 200, f"{path} {params}: {status} {text!r}"

    def create_channel(self, topic: str, channel: str) -> None:
        self.post("/topic/create", topic=topic)
        self.post("/channel/create", topic=topic, channel=channel)

    def stats(self, topic: str | None = None) -> dict[str, Any]:
        params = {"format": "json"}
        if topic:
            params["topic"] = topic
        result: dict[str, Any] = get_json(
            f"http://{self.http}/stats?{urllib.parse.urlencode(params)}"
        )
        return result

    def topic_stats(self, topic: str) -> dict[str, Any] | None:
        for t in self.stats(topic).get("topics") or []:
            if t["topic_name"] == topic:
                return dict(t)
        return None

    def channel_stats(self, topic: str, channel: str) -> dict[str, Any] | None:
        t = self.topic_stats(topic)
        for c in (t or {}).get("channels") or []:
            if c["channel_name"] == channel:
                return dict(c)
        return None

    def close(self) -> None:
        self.proc.close()


class Admin:
    """One `trionsq nsqadmin` process."""

    def __init__(self, args: Sequence[str], base_path: str = "") -> None:
        self.proc = DaemonProcess("nsqadmin", args=list(args))
        self.http = _http_address(self.proc)
        self.url = f"http://{self.http}{base_path.rstrip('/')}"

    def page(self, path: str, refresh_ms: int = 250) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.url}{path}{sep}refresh={refresh_ms}"

    def close(self) -> None:
        self.proc.close()


class Consumers:
    """trionsq.client consumers in one background Trio thread, so channel pages have clients."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        self._started.wait(10)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._started.set()
            await trio.sleep_forever()

    def add(
        self,
        topic: str,
        channel: str,
        nsqd_tcp: Sequence[str],
        *,
        hold: bool = False,
        max_in_flight: int = 10,
        **options: Any,
    ) -> None:
        """Subscribe; `hold` keeps every message in flight instead of finishing it."""

        async def handler(message: Message) -> None:
            if hold:
                await trio.sleep_forever()

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            consumer = Consumer(
                topic,
                channel,
                handler,
                nsqd_tcp_addresses=list(nsqd_tcp),
                max_in_flight=max_in_flight,
                close_timeout=0.2,
                **options,
            )
            async with consumer:
                task_status.started()
                await trio.sleep_forever()

        async def start() -> None:
            assert self._nursery is not None
            await self._nursery.start(run)

        trio.from_thread.run(start, trio_token=self._token)

    def close(self) -> None:
        if self._nursery is not None and self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._nursery.cancel_scope.cancel, trio_token=self._token)
        self._thread.join(10)


class Publisher:
    """Publishes `rate` messages a second to a topic on some nsqds, in a thread, until stopped."""

    def __init__(self, nodes: Sequence[Nsqd], topic: str, per_second: int = 40) -> None:
        self.nodes = list(nodes)
        self.topic = topic
        self.per_second = per_second
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        batch = max(1, self.per_second // 10)
        while not self._stop.wait(0.1):
            for node in self.nodes:
                with contextlib.suppress(Exception):
                    node.mpub(self.topic, batch)

    def __enter__(self) -> Publisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


#: nsqd flags so that topic and channel pages have end-to-end latency percentiles to show.
E2E_ARGS = ("--e2e-processing-latency-percentile=0.5,0.99",)


class Cluster:
    """nsqlookupd, `nodes` nsqds registered with it, and a default nsqadmin."""

    def __init__(self, nodes: int = 2, nsqd_args: Sequence[str] = E2E_ARGS) -> None:
        self._closers: list[Any] = []
        try:
            self.lookupd = DaemonProcess("nsqlookupd")
            self._closers.append(self.lookupd)
            self.lookupd_http = _http_address(self.lookupd)
            self.lookupd_tcp = _addr(self.lookupd.tcp_address)
            self.nodes: list[Nsqd] = []
            for i in range(nodes):
                node = Nsqd(self.lookupd_tcp, f"nsqd{i + 1}", nsqd_args)
                self._closers.append(node)
                self.nodes.append(node)
            self.admin = self.start_admin()
            self.consumers = Consumers()
            self._closers.append(self.consumers)
        except BaseException:
            self.close()
            raise

    def start_admin(self, *extra: str, base_path: str = "", lookupd: bool = True) -> Admin:
        """Another nsqadmin over this cluster (closed with it)."""
        args = [f"--lookupd-http-address={self.lookupd_http}"] if lookupd else []
        args += ["--http-client-connect-timeout=1s", "--http-client-request-timeout=2s"]
        if base_path:
            args.append(f"--base-path={base_path}")
        admin = Admin([*args, *extra], base_path=base_path)
        self._closers.append(admin)
        return admin

    def lookupd_get(self, path: str) -> Any:
        return get_json(f"http://{self.lookupd_http}{path}")

    def close(self) -> None:
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer.close()
        self._closers.clear()


def free_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
