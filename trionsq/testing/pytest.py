"""A pytest plugin that runs real trionsq daemons for a project's tests (docs/testing.md).

Opt in with ``pytest -p trionsq.testing.pytest`` or ``pytest_plugins = ["trionsq.testing.pytest"]``
in the root conftest.py. The fixtures are synchronous and function-scoped, so they serve plain,
pytest-asyncio, anyio and pytest-trio tests alike:

* ``nsqd``: one nsqd (`NSQDaemon`), configured by ``@pytest.mark.nsqd(...)``;
* ``nsqlookupd``: one nsqlookupd (`NSQDaemon`);
* ``nsq_cluster``: an nsqlookupd and N nsqds registered with it (`NSQCluster`), configured by
  ``@pytest.mark.nsq_cluster(nsqds=2, tls=False, auth=None, ...)``;
* ``nsq_factory``: an `NSQFactory` to start any others the test needs.

Every daemon is a ``python -m trionsq`` subprocess listening on 127.0.0.1 port 0, with its data
in a temporary directory; when the fixture ends (the test passed or not) each gets SIGTERM, a
SIGKILL if it outlives `STOP_TIMEOUT`, and the directory is removed. A failed test's report
carries the tail of each daemon's log. TLS certificates come from `trustme` (imported only
when a test asks for TLS); AUTH is a small HTTP server in a thread (`AuthServer`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
import warnings
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest

from . import DaemonProcess, pythonpath_env

__all__ = [
    "ALLOW_ALL",
    "STOP_TIMEOUT",
    "AuthServer",
    "NSQCluster",
    "NSQDaemon",
    "NSQFactory",
    "TLSFiles",
]

#: Seconds a daemon has to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 10.0

#: An authorization list that allows every publish and subscribe (``auth={"secret": ALLOW_ALL}``).
ALLOW_ALL: list[dict[str, Any]] = [
    {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}
]

#: Lines of each daemon's log shown in a failed test's report.
_LOG_TAIL = 60

#: The options each marker accepts (the fixture's keyword arguments to `NSQFactory`).
_NSQD_OPTIONS = ("args", "tls", "tls_required", "tls_client_auth_policy", "auth")
_CLUSTER_OPTIONS = (
    "nsqds",
    "nsqd_args",
    "nsqlookupd_args",
    "tls",
    "tls_required",
    "tls_client_auth_policy",
    "auth",
)

_MARKERS = (
    "nsqd(args=(), tls=False, tls_required=False, tls_client_auth_policy='', auth=None): "
    "options of the trionsq `nsqd` fixture (trionsq.testing.pytest)",
    "nsq_cluster(nsqds=2, nsqd_args=(), nsqlookupd_args=(), tls=False, tls_required=False, "
    "tls_client_auth_policy='', auth=None): options of the trionsq `nsq_cluster` fixture "
    "(trionsq.testing.pytest)",
)


# -- TLS ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TLSFiles:
    """PEM files from one throwaway CA (made with `trustme`).

    Clients trust nsqd with `ca_path` (``ssl.create_default_context(cafile=ca_path)``, pynsq's
    ``tls_options={"ca_certs": ca_path}``); nsqd's certificate is for ``127.0.0.1`` and
    ``localhost``. `client_cert_path` and `client_key_path` are a client certificate from the
    same CA (common name ``client``), for ``tls_client_auth_policy="require-verify"``.
    """

    ca_path: str
    cert_path: str
    key_path: str
    client_cert_path: str
    client_key_path: str


def _make_tls_files(directory: str) -> TLSFiles:
    try:
        import trustme
    except ImportError:  # not a dependency of trionsq: only TLS tests need it
        trustme = None  # type: ignore[assignment]
    if trustme is None:
        pytest.fail(
            "trionsq.testing.pytest: TLS needs the trustme package: pip install trustme",
            pytrace=False,
        )
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.invalid", common_name="client")
    files = TLSFiles(
        ca_path=os.path.join(directory, "ca.pem"),
        cert_path=os.path.join(directory, "nsqd.pem"),
        key_path=os.path.join(directory, "nsqd.key"),
        client_cert_path=os.path.join(directory, "client.pem"),
        client_key_path=os.path.join(directory, "client.key"),
    )
    ca.cert_pem.write_to_path(files.ca_path)
    server.cert_chain_pems[0].write_to_path(files.cert_path)
    for extra in server.cert_chain_pems[1:]:
        extra.write_to_path(files.cert_path, append=True)
    server.private_key_pem.write_to_path(files.key_path)
    client.cert_chain_pems[0].write_to_path(files.client_cert_path)
    client.private_key_pem.write_to_path(files.client_key_path)
    return files


# -- AUTH -----------------------------------------------------------------------------------


class AuthServer:
    """NSQ's auth server on 127.0.0.1 (a stdlib HTTP server in a thread).

    Answers ``GET /auth?secret=...&remote_ip=...&tls=...&common_name=...`` (and nsqd's POST
    form) from `secrets`: a secret mapped to a list of authorizations gets
    ``{"ttl": 3600, "identity": <secret>, "identity_url": "", "authorizations": [...]}``; one
    mapped to a dict gets that reply (with those defaults for what it leaves out). Any other
    secret gets 403, which nsqd turns into ``E_AUTH_FAILED``. `secrets` may be changed while
    the server runs; `requests` records each request's parameters.
    """

    def __init__(self, secrets: Mapping[str, Any]) -> None:
        for secret, value in secrets.items():
            if not isinstance(secret, str) or not isinstance(value, list | dict):
                raise TypeError(
                    "auth maps each secret (a str) to a list of authorizations or a reply dict, "
                    f"not {secret!r}: {value!r}"
                )
        self.secrets: dict[str, Any] = dict(secrets)
        self.requests: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _AuthHandler)
        self._server.daemon_threads = True
        cast(Any, self._server).auth = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, what nsqd's ``--auth-http-address`` gets."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    def reply(self, secret: str) -> dict[str, Any] | None:
        """The reply to `secret`, or None (a 403)."""
        value = self.secrets.get(secret)
        if value is None:
            return None
        reply: dict[str, Any] = {"ttl": 3600, "identity": secret, "identity_url": ""}
        if isinstance(value, list):
            reply["authorizations"] = value
        else:
            reply.update(value)
        return reply

    def _record(self, params: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(params)

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class _AuthHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        self._answer(url.path, {k: v[0] for k, v in query.items()})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        params = {str(k): str(v[0] if isinstance(v, list) and v else v) for k, v in body.items()}
        self._answer(urlsplit(self.path).path, params)

    def _answer(self, path: str, params: dict[str, str]) -> None:
        auth = cast(AuthServer, cast(Any, self.server).auth)
        if path != "/auth":
            self._send(404, {"message": "NOT_FOUND"})
            return
        auth._record(params)
        reply = auth.reply(params.get("secret", ""))
        if reply is None:
            self._send(403, {"message": "NOT_AUTHORIZED"})
        else:
            self._send(200, reply)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # nsqd's log says what it asked and what it got


# -- daemons --------------------------------------------------------------------------------


class NSQDaemon:
    """A trionsq nsqd or nsqlookupd that the plugin started (made by `NSQFactory`).

    Addresses are ``"127.0.0.1:PORT"`` strings, as NSQ clients take them; they stay the same
    across `restart`, as does `data_path` (nsqd's data directory; None for nsqlookupd).
    `https_address`, `tls` and `auth` are set for an nsqd started with TLS or AUTH.
    """

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        data_path: str | None,
        env: dict[str, str],
        tls: TLSFiles | None = None,
        auth: AuthServer | None = None,
    ) -> None:
        self.name = name
        self.data_path = data_path
        self.tls = tls
        self.auth = auth
        self._args = list(args)
        self._env = env
        self._old_log: list[str] = []
        self._returncode: int | None = None
        self._termed = False
        self._process: DaemonProcess | None = DaemonProcess(
            name, args=self._args, data_path=data_path, env=env
        )
        host, port = self._process.tcp_address
        self.tcp_address = f"{host}:{port}"
        self.http_address = _address(self._process.http_address)
        self.https_address = _address(self._process.https_address) if tls else None
        self.pid = self._process.proc.pid

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<NSQDaemon {self.name} {self.tcp_address} pid {self.pid} {state}>"

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.proc.poll() is None

    @property
    def log(self) -> str:
        """Everything the daemon has logged (stderr), across restarts."""
        current = self._process.stderr_lines if self._process is not None else []
        return "".join(self._old_log + current)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` seconds; returns the exit code (if it had
        already stopped, the code it stopped with)."""
        process = self._process
        if process is None:
            return self._returncode
        self._terminate()
        try:
            code = process.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            warnings.warn(
                f"trionsq {self.name} {self.tcp_address} outlived SIGTERM by {timeout:g} s; killed",
                stacklevel=2,
            )
            process.kill()
            code = process.proc.returncode
        self._finish(process, code)
        return code

    def kill(self) -> None:
        """SIGKILL at once: a crash, for tests of recovery (`restart` brings it back)."""
        process = self._process
        if process is not None:
            process.kill()
            self._finish(process, process.proc.returncode)

    def restart(self) -> None:
        """Stop the daemon if it runs, then start it again on the same addresses (and, for
        nsqd, the same data path, so its messages and metadata survive)."""
        self.stop()
        again = [f"--tcp-address={self.tcp_address}"]
        if self.http_address:
            again.append(f"--http-address={self.http_address}")
        if self.https_address:
            again.append(f"--https-address={self.https_address}")
        self._termed = False
        self._process = DaemonProcess(
            self.name, args=self._args + again, data_path=self.data_path, env=self._env
        )
        self.pid = self._process.proc.pid

    def _terminate(self) -> None:
        """SIGTERM, once, without waiting."""
        process = self._process
        if process is not None and not self._termed and process.proc.poll() is None:
            process.proc.send_signal(signal.SIGTERM)
            self._termed = True

    def _finish(self, process: DaemonProcess, code: int | None) -> None:
        process.close()
        self._old_log += process.stderr_lines
        self._returncode = code
        self._process = None


def _address(host_port: tuple[str, int] | None) -> str:
    if host_port is None:
        return ""
    return f"{host_port[0]}:{host_port[1]}"


@dataclass
class NSQCluster:
    """An nsqlookupd and the nsqds registered with it (each nsqd broadcasts 127.0.0.1).

    `tls` and `auth` are shared by every nsqd (one CA and one auth server), None when the
    cluster has no TLS or AUTH.
    """

    nsqlookupd: NSQDaemon
    nsqds: list[NSQDaemon]
    tls: TLSFiles | None = None
    auth: AuthServer | None = None

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        """Every nsqd's TCP address (a consumer's ``nsqd_tcp_addresses``)."""
        return [d.tcp_address for d in self.nsqds]


class NSQFactory:
    """Starts daemons, and on `close` stops every one of them and removes their files.

    The ``nsq_factory`` fixture is one per test; for a fixture of a wider scope, use it as a
    context manager: ``with NSQFactory() as nsq: yield nsq.nsqd()``.
    """

    def __init__(self) -> None:
        #: Every daemon started, oldest first.
        self.daemons: list[NSQDaemon] = []
        self._dir: str | None = None
        self._tls: TLSFiles | None = None
        self._auth_servers: list[AuthServer] = []
        self._env = pythonpath_env()

    def __enter__(self) -> NSQFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def directory(self) -> str:
        """The temporary directory holding data paths and certificates (made on first use)."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="trionsq-pytest-")
        return self._dir

    def tls_files(self) -> TLSFiles:
        """This factory's CA and certificates (made on first use; needs `trustme`)."""
        if self._tls is None:
            self._tls = _make_tls_files(self.directory)
        return self._tls

    def auth_server(self, secrets: Mapping[str, Any]) -> AuthServer:
        """A running `AuthServer` answering `secrets`, closed with the factory."""
        server = AuthServer(secrets)
        self._auth_servers.append(server)
        return server

    def nsqlookupd(self, args: Sequence[str] = ()) -> NSQDaemon:
        """Start an nsqlookupd; `args` are more ``trionsq nsqlookupd`` flags."""
        daemon = NSQDaemon("nsqlookupd", _flags(args), None, self._env)
        self.daemons.append(daemon)
        return daemon

    def nsqd(
        self,
        args: Sequence[str] = (),
        *,
        lookupd: NSQDaemon | Sequence[NSQDaemon] = (),
        tls: bool = False,
        tls_required: bool | str = False,
        tls_client_auth_policy: str = "",
        auth: Mapping[str, Any] | AuthServer | None = None,
    ) -> NSQDaemon:
        """Start an nsqd.

        * `args`: more ``trionsq nsqd`` flags (``["--mem-queue-size=0"]``, say);
        * `lookupd`: nsqlookupd(s) to register with (``--lookupd-tcp-address``);
        * `tls`: a certificate from `tls_files` (clients may upgrade: IDENTIFY ``tls_v1``) and
          an HTTPS listener; `tls_required` (True or ``"tcp-https"``) and
          `tls_client_auth_policy` (``"require"``, ``"require-verify"``) imply it;
        * `auth`: secrets for a new `AuthServer` (see there), or a running one.
        """
        argv = _flags(args)
        if not any(_is_flag(a, "broadcast-address") for a in argv):
            argv.append("--broadcast-address=127.0.0.1")
        lookupds = [lookupd] if isinstance(lookupd, NSQDaemon) else list(lookupd)
        argv += [f"--lookupd-tcp-address={d.tcp_address}" for d in lookupds]
        files = None
        if tls or tls_required or tls_client_auth_policy:
            files = self.tls_files()
            argv += [
                f"--tls-cert={files.cert_path}",
                f"--tls-key={files.key_path}",
                f"--tls-root-ca-file={files.ca_path}",
            ]
            if tls_required:
                value = "true" if tls_required is True else str(tls_required)
                argv.append(f"--tls-required={value}")
            if tls_client_auth_policy:
                argv.append(f"--tls-client-auth-policy={tls_client_auth_policy}")
        server = None
        if auth is not None:
            server = auth if isinstance(auth, AuthServer) else self.auth_server(auth)
            argv.append(f"--auth-http-address={server.address}")
        data_path = tempfile.mkdtemp(prefix="nsqd-", dir=self.directory)
        daemon = NSQDaemon("nsqd", argv, data_path, self._env, tls=files, auth=server)
        self.daemons.append(daemon)
        return daemon

    def cluster(
        self,
        nsqds: int = 2,
        *,
        nsqd_args: Sequence[str] = (),
        nsqlookupd_args: Sequence[str] = (),
        tls: bool = False,
        tls_required: bool | str = False,
        tls_client_auth_policy: str = "",
        auth: Mapping[str, Any] | AuthServer | None = None,
        timeout: float = 15.0,
    ) -> NSQCluster:
        """Start an nsqlookupd and `nsqds` nsqds registered with it, and wait (up to `timeout`
        seconds) until the nsqlookupd lists them all in ``/nodes``. The TLS and AUTH options
        are `nsqd`'s, for every nsqd (one CA, one auth server)."""
        nsqd_args = _flags(nsqd_args)
        lookupd = self.nsqlookupd(nsqlookupd_args)
        server = None
        if auth is not None:
            server = auth if isinstance(auth, AuthServer) else self.auth_server(auth)
        started = [
            self.nsqd(
                nsqd_args,
                lookupd=lookupd,
                tls=tls,
                tls_required=tls_required,
                tls_client_auth_policy=tls_client_auth_policy,
                auth=server,
            )
            for _ in range(nsqds)
        ]
        _wait_registered(lookupd, started, timeout)
        files = self._tls if (tls or tls_required or tls_client_auth_policy) else None
        return NSQCluster(lookupd, started, tls=files, auth=server)

    def close(self) -> None:
        """Stop every daemon (all are sent SIGTERM at once, newest first), stop the auth
        servers and remove the temporary directory."""
        problem: BaseException | None = None
        for daemon in reversed(self.daemons):
            daemon._terminate()
        for daemon in reversed(self.daemons):
            try:
                daemon.stop()
            except BaseException as err:  # stop the others, then raise the first
                if problem is None:
                    problem = err
                daemon.kill()
        try:
            if problem is not None:
                raise problem
        finally:
            for server in self._auth_servers:
                server.close()
            self._auth_servers.clear()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def log_sections(self) -> list[tuple[str, str]]:
        """(title, the log's last lines) of each daemon, for a failed test's report."""
        sections = []
        for daemon in self.daemons:
            lines = daemon.log.splitlines()[-_LOG_TAIL:]
            title = f"trionsq {daemon.name} {daemon.tcp_address} (pid {daemon.pid}) log"
            sections.append((title, "\n".join(lines)))
        return sections


def _flags(args: Sequence[str]) -> list[str]:
    """`args` as a list, refusing a lone string (whose characters would become flags)."""
    if isinstance(args, str):
        raise TypeError(f"daemon flags are a list of strings, not the string {args!r}")
    return [str(a) for a in args]


def _is_flag(arg: str, name: str) -> bool:
    return arg.startswith("-") and arg.lstrip("-").split("=", 1)[0] == name


def _wait_registered(lookupd: NSQDaemon, nsqds: Sequence[NSQDaemon], timeout: float) -> None:
    """Poll the nsqlookupd's ``/nodes`` until each nsqd's TCP port is there."""
    wanted = {int(d.tcp_address.rpartition(":")[2]) for d in nsqds}
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    while True:
        try:
            url = f"http://{lookupd.http_address}/nodes"
            with urllib.request.urlopen(url, timeout=2) as response:
                body = json.load(response)
            producers = body.get("data", body).get("producers", [])
            seen = {int(p["tcp_port"]) for p in producers}
        except (OSError, ValueError, KeyError, AttributeError):
            pass
        if wanted <= seen:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"nsqds {sorted(wanted - seen)} did not register with nsqlookupd "
                f"{lookupd.tcp_address} within {timeout:g} s"
            )
        time.sleep(0.05)


# -- pytest hooks and fixtures --------------------------------------------------------------

_FACTORY = pytest.StashKey[NSQFactory]()


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """A failed test's report gets the tail of each of its daemons' logs."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    factory = item.stash.get(_FACTORY, None)
    if factory is not None and report.failed and report.when in ("setup", "call"):
        for title, text in factory.log_sections():
            report.sections.append((title, text))


def _marker_options(
    request: pytest.FixtureRequest, name: str, allowed: tuple[str, ...]
) -> dict[str, Any]:
    """The keyword arguments of the test's closest `name` marker (a positional argument is
    the first allowed option), checked against `allowed`."""
    marker = request.node.get_closest_marker(name)
    if marker is None:
        return {}
    if len(marker.args) > 1:
        pytest.fail(f"@pytest.mark.{name} takes at most one positional argument", pytrace=False)
    options = dict(marker.kwargs)
    if marker.args:
        options[allowed[0]] = marker.args[0]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        pytest.fail(
            f"@pytest.mark.{name}: unknown option(s) {', '.join(unknown)}; "
            f"expected {', '.join(allowed)}",
            pytrace=False,
        )
    return options


@pytest.fixture
def nsq_factory(request: pytest.FixtureRequest) -> Iterator[NSQFactory]:
    """An `NSQFactory`: start more daemons in a test; all are stopped when it ends."""
    with NSQFactory() as factory:
        request.node.stash[_FACTORY] = factory
        yield factory


@pytest.fixture
def nsqd(request: pytest.FixtureRequest, nsq_factory: NSQFactory) -> NSQDaemon:
    """A running nsqd (`NSQDaemon`); ``@pytest.mark.nsqd(args=[...], tls=True, auth={...})``
    configures it (`NSQFactory.nsqd`'s options)."""
    options = _marker_options(request, "nsqd", _NSQD_OPTIONS)
    args = options.pop("args", ())
    return nsq_factory.nsqd(args, **options)


@pytest.fixture
def nsqlookupd(nsq_factory: NSQFactory) -> NSQDaemon:
    """A running nsqlookupd (`NSQDaemon`, no data path)."""
    return nsq_factory.nsqlookupd()


@pytest.fixture
def nsq_cluster(request: pytest.FixtureRequest, nsq_factory: NSQFactory) -> NSQCluster:
    """An nsqlookupd and N nsqds registered with it (`NSQCluster`); configured by
    ``@pytest.mark.nsq_cluster(nsqds=2, tls=False, auth=None, ...)`` (`NSQFactory.cluster`'s
    options)."""
    return nsq_factory.cluster(**_marker_options(request, "nsq_cluster", _CLUSTER_OPTIONS))
