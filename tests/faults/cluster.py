"""The system under test: three nsqd processes replicating one topic, on 127.0.0.1 or each in
a network namespace of its own joined by veth pairs (`Netns`), so that links can be cut.

The nsqd command line is a parameter (`nsqd_command`; ``TRIONSQ_FAULTS_NSQD`` in the
environment, split like a shell line): any nsqd that takes Go nsqd's flags and trionsq's
replication flags (``--replicate-to``, ``--replicate-topic``, ``--replication-secret``) and
shows the topic's ``replication`` object (role, epoch) in ``/stats?format=json`` can be put
under the suite. Its stderr goes to ``<root>/n<i>.log``; with `Cluster`'s ``trace`` (trionsq's
nsqd only) each member also writes ``--replication-trace-file=<root>/n<i>.trace``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from trionsq.testing import free_ports, pythonpath_env

TOPIC = "faults"
CHANNEL = "c"
#: The channel nobody consumes until the drain (scenarios that damage data): its backlog
#: keeps every message live in the members' logs, so damage hits messages still to deliver.
BACKLOG_CHANNEL = "b"
SECRET = "faults-secret"
#: The ports every member listens on inside its own network namespace (none of NSQ's
#: defaults: a namespace is private, so the same numbers serve every member).
NETNS_TCP_PORT, NETNS_HTTP_PORT = 14150, 14151


def nsqd_command() -> list[str]:
    """The command that starts an nsqd (flags are appended): ``TRIONSQ_FAULTS_NSQD`` or
    trionsq's."""
    given = os.environ.get("TRIONSQ_FAULTS_NSQD")
    if given:
        return shlex.split(given)
    return [sys.executable, "-m", "trionsq", "nsqd"]


class Member:
    """One nsqd of the set, restartable on the same addresses and data directory.

    `client_address` is where the clients (in the root namespace) reach it; `peer_addresses`
    maps another member's index to the address this member dials it at."""

    def __init__(
        self,
        index: int,
        data: Path,
        log: Path,
        listen: tuple[str, int, int],
        client_address: tuple[str, int],
        http_address: tuple[str, int],
        peer_addresses: Sequence[str],
        command: Sequence[str],
        extra_args: Sequence[str] = (),
        prefix: Sequence[str] = (),
        trace: Path | None = None,
    ) -> None:
        self.index = index
        self.node_id = index + 1
        self.data = data
        self.log = log
        self.client_address = client_address
        self.http_address = http_address
        host, tcp, http = listen
        self.args = [
            f"--node-id={self.node_id}",
            f"--tcp-address={host}:{tcp}",
            f"--http-address={host}:{http}",
            f"--data-path={data}",
            f"--broadcast-address={client_address[0]}",
            f"--replicate-topic=^{TOPIC}$",
            f"--replication-secret={SECRET}",
            *(f"--replicate-to={peer}" for peer in peer_addresses),
            *extra_args,
            *([f"--replication-trace-file={trace}"] if trace is not None else []),
        ]
        #: trionsq's replication trace (checked by spec/trace_check.py), if asked for
        self.trace = trace
        self.argv = [*prefix, *command, *self.args]
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False
        #: one HTTP client per thread (the monitors poll while the trial asks)
        self._local = threading.local()
        self._clients: list[httpx.Client] = []

    @property
    def name(self) -> str:
        return f"n{self.node_id}"

    @property
    def url(self) -> str:
        host, port = self.http_address
        return f"http://{host}:{port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the process (returns at once: `wait_ready` waits for its /ping)."""
        assert not self.running, f"{self.name} is already running"
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            log.write(f"=== start {time.strftime('%H:%M:%S')}: {shlex.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=pythonpath_env(),
                cwd=self.log.parent,  # not a checkout: `python -m` would import from it first
                start_new_session=True,
            )
        self.stopped = False

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"{self.name} exited at start-up:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/ping", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer /ping in {timeout} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """kill -9 (a stopped process too) and reap it."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        self.stopped = False

    def pause(self) -> None:
        """SIGSTOP."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        """SIGCONT."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def replication(self, timeout: float = 0.5) -> dict[str, Any] | None:
        """The topic's ``replication`` object from /stats (None: no answer, or no topic)."""
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpx.Client(timeout=0.5)
            self._clients.append(client)
        try:
            r = client.get(
                self.url + "/stats",
                params={"format": "json", "topic": TOPIC},
                timeout=timeout,
            )
            for topic in r.json().get("topics") or []:
                if topic.get("topic_name") == TOPIC:
                    info = topic.get("replication")
                    return info if isinstance(info, dict) else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return None

    def post(self, path: str, timeout: float = 5.0) -> int:
        """POST an HTTP admin action; its status (0: no answer)."""
        try:
            return httpx.post(self.url + path, timeout=timeout).status_code
        except httpx.HTTPError:
            return 0

    def log_tail(self, lines: int = 30, notable: bool = False) -> str:
        """The log's last `lines` lines (`notable`: only warnings, errors, replication
        events, tracebacks and the start lines)."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        if notable:
            marks = ("WARN", "ERROR", "FATAL", "REPLICATION", "Traceback", "Error", "=== start")
            text = [line for line in text if any(mark in line for mark in marks)]
        return "\n".join(f"  {self.name}| {line}" for line in text[-lines:])

    def close(self) -> None:
        self.kill()
        for client in self._clients:
            client.close()
        self._clients.clear()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def netns_unavailable() -> str | None:
    """Why members cannot run in network namespaces here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    try:
        _ip("netns", "list")
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"ip netns is not available: {exc}"
    return None


class Netns:
    """Three network namespaces, one per member, each joined to the root namespace (where the
    clients are) and to each other member by its own veth pair.

    Every name is made here, unique to this process and run (`tag`); `close` deletes what was
    made, and nothing else is ever addressed. Addresses: a /24 of 10.0.0.0/8 with no route in
    the root namespace (checked), a /30 per link. A link is cut by setting both of its ends
    down (its routes go with it: a member's packets to the other side are not sent, TCP
    connections stay open and retransmit, new connections fail at once) and restored by
    setting them up again."""

    _runs = 0

    def __init__(self, members: int = 3) -> None:
        Netns._runs += 1
        pid = os.getpid()
        self.tag = f"{pid % 100000}{Netns._runs % 10}"
        self.namespaces = [f"trionsq-faults-{pid}-{Netns._runs}-n{i + 1}" for i in range(members)]
        self.created_namespaces: list[str] = []
        self.root_links = [f"tqf{self.tag}r{i}" for i in range(members)]
        self.created_root_links: list[str] = []
        self.members = members
        self.base = ""
        #: (a, b) -> (address of a's end, address of b's end); "root" is the root namespace.
        self.addresses: dict[tuple[Any, Any], tuple[str, str]] = {}
        self.cut: set[frozenset[Any]] = set()
        self.created_route: str | None = None

    def _pick_base(self) -> str:
        routes = _ip("-4", "route", "show", "table", "all").stdout
        addrs = _ip("-4", "-o", "addr").stdout
        seed = os.getpid() * 7 + Netns._runs
        for attempt in range(200):
            n = (seed + attempt * 131) % (200 * 250)
            base = f"10.{20 + n // 250}.{n % 250}."
            if base not in routes and base not in addrs:
                return base
        raise RuntimeError("no free 10.x.y.0/24 for the test links")

    def setup(self) -> None:
        self.base = self._pick_base()
        # While a member's link to the clients is cut, its address must not fall through to
        # the root namespace's default route (it would leave the machine): the test's whole
        # block is unreachable there but for the links' own /30 routes.
        _ip("route", "add", "unreachable", f"{self.base}0/24")
        self.created_route = f"{self.base}0/24"
        for ns in self.namespaces:
            _ip("netns", "add", ns)
            self.created_namespaces.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        subnet = 0
        for i, ns in enumerate(self.namespaces):
            root_end, ns_end = f"{self.base}{4 * subnet + 1}", f"{self.base}{4 * subnet + 2}"
            subnet += 1
            _ip("link", "add", self.root_links[i], "type", "veth", "peer", "name", "c", "netns", ns)
            self.created_root_links.append(self.root_links[i])
            _ip("addr", "add", f"{root_end}/30", "dev", self.root_links[i])
            _ip("-n", ns, "addr", "add", f"{ns_end}/30", "dev", "c")
            self.addresses[("root", i)] = (root_end, ns_end)
        for i in range(self.members):
            for j in range(i + 1, self.members):
                a, b = f"{self.base}{4 * subnet + 1}", f"{self.base}{4 * subnet + 2}"
                subnet += 1
                ns_i, ns_j = self.namespaces[i], self.namespaces[j]
                _ip(
                    "link", "add", f"p{j}", "netns", ns_i,
                    "type", "veth", "peer", "name", f"p{i}", "netns", ns_j,
                )  # fmt: skip
                _ip("-n", ns_i, "addr", "add", f"{a}/30", "dev", f"p{j}")
                _ip("-n", ns_j, "addr", "add", f"{b}/30", "dev", f"p{i}")
                self.addresses[(i, j)] = (a, b)
        for link in self.links():
            self._set(link, "up")

    def links(self) -> list[tuple[Any, Any]]:
        return list(self.addresses)

    def _ends(self, link: tuple[Any, Any]) -> list[tuple[str | None, str]]:
        """(namespace or None for the root namespace, device) of each end of a link."""
        a, b = link
        if a == "root":
            return [(None, self.root_links[b]), (self.namespaces[b], "c")]
        return [(self.namespaces[a], f"p{b}"), (self.namespaces[b], f"p{a}")]

    def _set(self, link: tuple[Any, Any], state: str) -> None:
        for ns, dev in self._ends(link):
            if ns is None:
                _ip("link", "set", dev, state)
            else:
                _ip("-n", ns, "link", "set", dev, state)

    @staticmethod
    def _key(a: Any, b: Any) -> tuple[Any, Any]:
        if a == "root":
            return ("root", b)
        if b == "root":
            return ("root", a)
        return (min(a, b), max(a, b))

    def cut_link(self, a: Any, b: Any) -> None:
        """Cut the link between members `a` and `b` (indexes, or "root" for the clients)."""
        key = self._key(a, b)
        self._set(key, "down")
        self.cut.add(frozenset(key))

    def restore_link(self, a: Any, b: Any) -> None:
        key = self._key(a, b)
        self._set(key, "up")
        self.cut.discard(frozenset(key))

    def restore_all(self) -> None:
        for link in self.links():
            if frozenset(link) in self.cut:
                self.restore_link(*link)

    def client_address(self, i: int) -> str:
        """Member `i`'s address on its link to the root namespace."""
        return self.addresses[("root", i)][1]

    def peer_address(self, i: int, j: int) -> str:
        """The address member `i` dials member `j` at (j's end of their link)."""
        a, b = self.addresses[self._key(i, j)]
        return b if i < j else a

    def prefix(self, i: int) -> list[str]:
        """The command prefix that runs a program in member `i`'s namespace (it execs: the
        process's pid is the program's)."""
        return ["ip", "netns", "exec", self.namespaces[i]]

    def close(self) -> None:
        """Delete the namespaces (their devices go with them once their processes are gone,
        and the root ends of their veth pairs with those) and any root end left."""
        for ns in self.created_namespaces:
            _ip("netns", "del", ns, check=False)
        self.created_namespaces.clear()
        deadline = time.monotonic() + 5
        for dev in self.created_root_links:
            while time.monotonic() < deadline:
                if _ip("link", "show", dev, check=False).returncode != 0:
                    break
                time.sleep(0.05)
            else:
                _ip("link", "del", dev, check=False)
        self.created_root_links.clear()
        if self.created_route is not None:
            _ip("route", "del", "unreachable", self.created_route, check=False)
            self.created_route = None


class Cluster:
    """Three members replicating `TOPIC`, on 127.0.0.1 (`netns` None) or in namespaces."""

    def __init__(
        self,
        root: Path,
        netns: Netns | None = None,
        extra_args: Sequence[str] = (),
        command: Sequence[str] | None = None,
        data_dirs: Sequence[Path] | None = None,
        size: int = 3,
        trace: bool = False,
    ) -> None:
        self.root = root
        self.netns = netns
        command = list(command) if command is not None else nsqd_command()
        self.members: list[Member] = []
        if netns is None:
            flat = free_ports(2 * size)
            ports = [(flat[2 * i], flat[2 * i + 1]) for i in range(size)]
        for i in range(size):
            data = data_dirs[i] if data_dirs is not None else root / f"n{i + 1}"
            if netns is None:
                tcp, http = ports[i]
                listen = ("127.0.0.1", tcp, http)
                client = ("127.0.0.1", tcp)
                http_address = ("127.0.0.1", http)
                peers = [f"127.0.0.1:{ports[j][0]}" for j in range(size) if j != i]
                prefix: list[str] = []
            else:
                listen = ("0.0.0.0", NETNS_TCP_PORT, NETNS_HTTP_PORT)
                client = (netns.client_address(i), NETNS_TCP_PORT)
                http_address = (netns.client_address(i), NETNS_HTTP_PORT)
                peers = [
                    f"{netns.peer_address(i, j)}:{NETNS_TCP_PORT}" for j in range(size) if j != i
                ]
                prefix = netns.prefix(i)
            self.members.append(
                Member(
                    i,
                    data,
                    root / f"n{i + 1}.log",
                    listen,
                    client,
                    http_address,
                    peers,
                    command,
                    extra_args,
                    prefix,
                    root / f"n{i + 1}.trace" if trace else None,
                )
            )

    def start(self, members: Sequence[Member] | None = None) -> None:
        """Start members (all by default) and wait until each answers /ping."""
        chosen = list(members) if members is not None else self.members
        for member in chosen:
            member.start()
        for member in chosen:
            member.wait_ready()

    def roles(self) -> list[dict[str, Any] | None]:
        return [member.replication() for member in self.members]

    def primary(self) -> Member | None:
        for member, info in zip(self.members, self.roles(), strict=True):
            if info and info.get("role") == "primary":
                return member
        return None

    def traces(self) -> list[Path]:
        """The members' trace files (none unless the cluster was made with `trace`)."""
        return [m.trace for m in self.members if m.trace is not None and m.trace.exists()]

    def converged(self) -> bool:
        """Every member answers, one of them primary, all in its epoch."""
        infos = self.roles()
        if any(info is None for info in infos):
            return False
        epochs = {info["epoch"] for info in infos if info}
        primaries = [info for info in infos if info and info.get("role") == "primary"]
        return len(epochs) == 1 and len(primaries) == 1

    def close(self) -> None:
        for member in self.members:
            with contextlib.suppress(Exception):
                member.resume()
            member.close()
