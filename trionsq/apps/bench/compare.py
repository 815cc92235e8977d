"""`bench/compare`: the same benchmarks against two nsqd commands (trionsq's and Go's).

Each measurement runs ``--rounds`` times per server, alternating the servers round by round
(trionsq, go, trionsq, go, ...), each round on a fresh daemon with free ports and a fresh
temporary data directory (killed and removed after the round). For every figure it prints
both servers' median over the rounds, their min-max, and the ratio trionsq/go. Without
``--go-nsqd`` it measures trionsq alone. The figures (100-byte messages):

* throughput: publish (MPUB 200 x 100 B for --runfor), then deliver (RDY 2500, draining what
  the writer left, for at most --runfor), with the memory queue (nothing on disk), with the
  default flags (beyond 10,000 messages to disk), and with --mem-queue-size=0;
* pub-rate: single PUBs from one connection, each OK awaited, aiming at 30,000/s: the rate
  reached (from the 30k/s latency run);
* latency: publish-to-delivery p50/p99 at 5,000/s and 30,000/s, the consumer IDENTIFYing with
  no output buffer, so that neither daemon holds deliveries back (`e2e`);
* memory: RSS per queued message (1,000,000 messages in the memory queue, `memory`);
* idle: CPU (% of one core) with 10,000 topics x 2 channels and no traffic, the RSS, and how
  long creating them over HTTP took (`idle`);
* connections: RSS per idle V2 connection, over 10,000 of them (`connections`).

The throughput clients are Go's bench_writer/bench_reader when their paths are given, else
trionsq's (several client processes); both servers of a run get the same clients.
With ``--background N`` each round runs beside N CPU-bound processes (a busy machine), started
before the round's daemon and stopped after it, so that both servers face the same competition.

Progress goes to stderr, the table to stdout; ``--json`` adds one JSON line of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .common import BenchError, cpu_seconds, parse_duration

TOPIC = "sub_bench"
CHANNEL = "ch"
SIZE = 100
BATCH = 200
RDY = 2500
LATENCY_RATES = (5000, 30000)
DEFAULT_MEM_QUEUE = 100_000_000
_DASH = "\u2013"  # en dash, between min and max
#: Suffix of a value key saying that the figure is only a lower bound in that round.
LOWER_BOUND = ":lower_bound"


# --- figures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One number in the table: its label, unit, and which way is better."""

    label: str
    unit: str
    higher_is_better: bool
    decimals: int = 0


#: The throughput configurations: (key, label, daemon flags; None: the memory-queue size).
CONFIGS: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("mem", "memory queue", None),
    ("default", "default flags", ()),
    ("disk", "--mem-queue-size=0", ("--mem-queue-size=0",)),
)


def figures_for(topics: int = 10_000, channels: int = 2, conns: int = 10_000) -> dict[str, Figure]:
    """Every figure, in table order; labels name the idle and connections parameters."""
    figures: dict[str, Figure] = {}
    for key, label, _ in CONFIGS:
        figures[f"publish_{key}"] = Figure(f"publish, {label}", "msg/s", True)
        figures[f"deliver_{key}"] = Figure(f"deliver, {label}", "msg/s", True)
    figures["pub_rate"] = Figure("single PUB rate, 1 conn (aim 30k/s)", "msg/s", True)
    for rate in LATENCY_RATES:
        # At 30k/s one connection awaiting each OK may fall short: the rate is pub_rate.
        aim = " (aimed)" if rate > 5000 else ""
        for p in ("p50", "p99"):
            figures[f"lat{rate // 1000}k_{p}"] = Figure(f"e2e {p} at {rate:,}/s{aim}", "µs", False)
    figures["rss_per_msg"] = Figure("RSS per queued message", "B", False)
    idle = f"{topics:,} topics x {channels} channels"
    figures["idle_cpu"] = Figure(f"idle CPU, {idle}", "% core", False, 2)
    figures["idle_rss"] = Figure(f"RSS, {idle}", "MiB", False, 1)
    figures["idle_create"] = Figure(f"creating {idle} over HTTP", "s", False, 1)
    figures["conn_bytes"] = Figure(f"RSS per idle connection ({conns:,})", "B", False)
    return figures


FIGURES = figures_for()


# --- servers and daemons ---------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """An nsqd command to measure."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str] | None = None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (Go's nsqd cannot listen on port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Daemon:
    """One nsqd for one round: free ports, a fresh data directory, its log in a file.
    Killed (SIGKILL: nothing in it is worth keeping) and removed by `close`."""

    def __init__(self, server: Server, flags: Sequence[str], startup_timeout: float = 30.0):
        self.server = server
        self._dir = tempfile.TemporaryDirectory(prefix=f"trionsq-compare-{server.name}-")
        data = os.path.join(self._dir.name, "data")
        os.mkdir(data)
        self.log_path = os.path.join(self._dir.name, "nsqd.log")
        self.tcp = ("127.0.0.1", free_port())
        self.http = ("127.0.0.1", free_port())
        argv = [
            *server.argv,
            f"--tcp-address=127.0.0.1:{self.tcp[1]}",
            f"--http-address=127.0.0.1:{self.http[1]}",
            f"--data-path={data}",
            *flags,
        ]
        self.argv = argv
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=server.env
            )
        self.pid = self.proc.pid
        try:
            self._wait_ready(startup_timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://{self.http[0]}:{self.http[1]}/ping"
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"nsqd exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                socket.create_connection(self.tcp, timeout=1.0).close()
                with urllib.request.urlopen(url, timeout=2.0) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"nsqd did not start in {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def explain(self, error: BaseException) -> str:
        """The error, with the daemon's exit status and log tail if it died."""
        if self.proc.poll() is None:
            return str(error)
        return f"{error}\nnsqd exited with {self.proc.returncode}; its log ends:\n{self.log_tail()}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._dir.cleanup()

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- Go's bench tools --------------------------------------------------------------------------

_GO_LINE = re.compile(
    r"duration: (?P<duration>\S+) - (?P<mbs>\S+)mb/s - (?P<ops>\S+)ops/s - (?P<us>\S+)us/op"
)


@dataclass(frozen=True)
class GoBenchResult:
    """The summary line of Go's bench_writer or bench_reader."""

    duration: float
    mb_per_s: float
    ops_per_s: float
    us_per_op: float

    @property
    def msgs(self) -> int:
        return round(self.ops_per_s * self.duration)


def parse_go_bench_line(text: str) -> GoBenchResult:
    """Parse ``duration: 10.0s - 117.310mb/s - 1230000.000ops/s - 0.813us/op`` (the last such
    line of `text`, which may carry a log prefix)."""
    matches = list(_GO_LINE.finditer(text))
    if not matches:
        raise BenchError(f"no 'duration: ...' line in the output: {text[-500:]!r}")
    m = matches[-1]
    return GoBenchResult(
        duration=parse_duration(m["duration"]),
        mb_per_s=float(m["mbs"]),
        ops_per_s=float(m["ops"]),
        us_per_op=float(m["us"]),
    )


def go_duration(seconds: float) -> str:
    """`seconds` as a Go duration flag value (``10s``, ``1.5s``)."""
    return f"{seconds:g}s"


def _run_go_tool(argv: Sequence[str], timeout: float) -> GoBenchResult:
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{argv[0]} did not finish within {timeout:.0f}s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-800:]
        raise BenchError(f"{os.path.basename(argv[0])} exited with {proc.returncode}: {tail}")
    return parse_go_bench_line(proc.stderr + proc.stdout)


# --- throughput clients -------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    msgs: int
    elapsed: float

    @property
    def rate(self) -> float:
        return self.msgs / self.elapsed if self.elapsed > 0 else 0.0


@dataclass(frozen=True)
class Clients:
    """The throughput clients: Go's tools where a path is given, else trionsq's writer and
    reader with `procs` processes each."""

    go_writer: str | None = None
    go_reader: str | None = None
    procs: int = 2

    def describe(self) -> str:
        writer = f"Go {self.go_writer}" if self.go_writer else f"trionsq writer x{self.procs}"
        reader = f"Go {self.go_reader}" if self.go_reader else f"trionsq reader x{self.procs}"
        return f"publish: {writer}; deliver: {reader}"

    def publish(self, address: tuple[str, int], runfor: float) -> Rate:
        if self.go_writer:
            r = _run_go_tool(
                [
                    self.go_writer,
                    f"-runfor={go_duration(runfor)}",
                    f"-nsqd-tcp-address={address[0]}:{address[1]}",
                    f"-topic={TOPIC}",
                    f"-size={SIZE}",
                    f"-batch-size={BATCH}",
                ],
                runfor + 120.0,
            )
            return Rate(r.msgs, r.duration)
        from . import writer

        w = writer.run(address, TOPIC, size=SIZE, batch_size=BATCH, runfor=runfor, procs=self.procs)
        return Rate(w.msgs, w.elapsed)

    def deliver(self, address: tuple[str, int], runfor: float, backlog: int) -> Rate:
        if self.go_reader:
            r = _run_go_tool(
                [
                    self.go_reader,
                    f"-runfor={go_duration(runfor)}",
                    f"-nsqd-tcp-address={address[0]}:{address[1]}",
                    f"-topic={TOPIC}",
                    f"-channel={CHANNEL}",
                    f"-size={SIZE}",
                    f"-rdy={RDY}",
                ],
                runfor + 120.0,
            )
            return Rate(r.msgs, r.duration)
        from . import reader

        d = reader.run(
            address,
            TOPIC,
            CHANNEL,
            size=SIZE,
            rdy=RDY,
            runfor=runfor,
            procs=self.procs,
            count=backlog,
        )
        return Rate(d.msgs, d.elapsed)


# --- measurements ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """What the measurements need from the command line."""

    runfor: float = 10.0
    clients: Clients = field(default_factory=Clients)
    mem_queue_size: int = DEFAULT_MEM_QUEUE
    memory_count: int = 1_000_000
    topics: int = 10_000
    channels: int = 2
    idle_settle: float = 5.0
    idle_window: float = 10.0
    conns: int = 10_000
    output_buffer_size: int = -1
    output_buffer_timeout: int = 0
    nsqd_args: tuple[str, ...] = ()
    background: int = 0


Values = dict[str, float]


@dataclass(frozen=True)
class Measurement:
    """One unit of work per round and server: a daemon started with `flags`, then `run`."""

    key: str
    figures: tuple[str, ...]
    flags: Callable[[Options], tuple[str, ...]]
    run: Callable[[Daemon, Options], Values]


def _throughput(config: str) -> Callable[[Daemon, Options], Values]:
    def run(daemon: Daemon, opts: Options) -> Values:
        from .memory import topic_depth

        pub = opts.clients.publish(daemon.tcp, opts.runfor)
        _say(f"    publish: {pub.msgs:,} msgs in {pub.elapsed:.1f}s, {pub.rate:,.0f} msg/s")
        backlog = topic_depth(daemon.http, TOPIC) or pub.msgs
        dlv = opts.clients.deliver(daemon.tcp, opts.runfor, backlog)
        # Go's bench_reader runs for exactly --runfor: once it has drained the backlog its
        # rate is backlog / runfor, a lower bound of the daemon's.
        drained = bool(opts.clients.go_reader) and dlv.msgs >= backlog
        _say(
            f"    deliver: {dlv.msgs:,} of {backlog:,} msgs in {dlv.elapsed:.1f}s,"
            f" {dlv.rate:,.0f} msg/s" + (" (drained: a lower bound)" if drained else "")
        )
        values = {f"publish_{config}": pub.rate, f"deliver_{config}": dlv.rate}
        if drained:
            values[f"deliver_{config}{LOWER_BOUND}"] = 1.0
        return values

    return run


def _latency(rate: int) -> Callable[[Daemon, Options], Values]:
    def run(daemon: Daemon, opts: Options) -> Values:
        from . import e2e

        r = e2e.run(
            daemon.tcp,
            "latency_bench",
            CHANNEL,
            size=SIZE,
            rate=float(rate),
            count=max(int(rate * opts.runfor), 2000),
            rdy=RDY,
            output_buffer_size=opts.output_buffer_size,
            output_buffer_timeout_ms=opts.output_buffer_timeout,
        )
        _say(f"    {r.line()}")
        name = f"lat{rate // 1000}k"
        values = {f"{name}_p50": r.p50, f"{name}_p99": r.p99}
        if rate == 30000:
            values["pub_rate"] = r.rate
        return values

    return run


def _memory(daemon: Daemon, opts: Options) -> Values:
    from . import memory

    r = memory.run(
        daemon.tcp,
        daemon.pid,
        f"memory_bench_{int(time.time())}",
        size=SIZE,
        batch_size=BATCH,
        count=opts.memory_count,
        http_address=daemon.http,
    )
    _say(f"    {r.line()}")
    return {"rss_per_msg": r.per_message}


def _idle(daemon: Daemon, opts: Options) -> Values:
    from . import idle

    r = idle.run(
        daemon.pid,
        daemon.http,
        topics=opts.topics,
        channels=opts.channels,
        settle=opts.idle_settle,
        window=opts.idle_window,
    )
    _say(f"    {r.line()}")
    return {"idle_cpu": r.cpu_percent, "idle_rss": r.rss / 2**20, "idle_create": r.create_seconds}


def _connections(daemon: Daemon, opts: Options) -> Values:
    from . import connections

    r = connections.run(daemon.tcp, daemon.pid, conns=opts.conns)
    _say(f"    {r.line()}")
    return {"conn_bytes": r.per_conn}


def _no_flags(opts: Options) -> tuple[str, ...]:
    return ()


def _config_flags(flags: tuple[str, ...] | None) -> Callable[[Options], tuple[str, ...]]:
    def get(opts: Options) -> tuple[str, ...]:
        return flags if flags is not None else (f"--mem-queue-size={opts.mem_queue_size}",)

    return get


def _memory_flags(opts: Options) -> tuple[str, ...]:
    return (f"--mem-queue-size={max(opts.memory_count, 1_000_000)}",)


def _measurements() -> dict[str, Measurement]:
    found: dict[str, Measurement] = {}
    for key, _, flags in CONFIGS:
        found[f"throughput-{key}"] = Measurement(
            f"throughput-{key}",
            (f"publish_{key}", f"deliver_{key}"),
            _config_flags(flags),
            _throughput(key),
        )
    for rate in LATENCY_RATES:
        name = f"lat{rate // 1000}k"
        figures = (f"{name}_p50", f"{name}_p99") + (("pub_rate",) if rate == 30000 else ())
        found[f"latency-{rate // 1000}k"] = Measurement(
            f"latency-{rate // 1000}k", figures, _no_flags, _latency(rate)
        )
    found["memory"] = Measurement("memory", ("rss_per_msg",), _memory_flags, _memory)
    found["idle"] = Measurement("idle", ("idle_cpu", "idle_rss", "idle_create"), _no_flags, _idle)
    found["connections"] = Measurement("connections", ("conn_bytes",), _no_flags, _connections)
    return found


MEASUREMENTS = _measurements()

#: --only names: the measurements each selects, in run order.
SELECTIONS: dict[str, tuple[str, ...]] = {
    "throughput": tuple(f"throughput-{key}" for key, _, _ in CONFIGS),
    **{f"throughput-{key}": (f"throughput-{key}",) for key, _, _ in CONFIGS},
    "pub-rate": ("latency-30k",),
    "latency": ("latency-5k", "latency-30k"),
    "latency-5k": ("latency-5k",),
    "latency-30k": ("latency-30k",),
    "memory": ("memory",),
    "idle": ("idle",),
    "connections": ("connections",),
}


def select(only: Sequence[str] | None) -> list[Measurement]:
    """The measurements `--only` names (all of them when None), each once, in run order."""
    names = list(only) if only else list(SELECTIONS)
    wanted: set[str] = set()
    for name in names:
        if name not in SELECTIONS:
            raise ValueError(f"unknown figure {name!r} (one of {', '.join(SELECTIONS)})")
        wanted.update(SELECTIONS[name])
    return [m for key, m in MEASUREMENTS.items() if key in wanted]


def schedule(
    measurements: Sequence[Measurement], rounds: int, servers: Sequence[Server]
) -> list[tuple[Measurement, int, Server]]:
    """The run order: for each measurement, each round, each server in turn (trionsq, go,
    trionsq, go, ...)."""
    return [(m, r, s) for m in measurements for r in range(rounds) for s in servers]


# --- results and the table --------------------------------------------------------------------


@dataclass
class Results:
    """Every round's value of every figure, per server (None: that round failed)."""

    servers: list[str]
    figures: dict[str, Figure] = field(default_factory=lambda: dict(FIGURES))
    values: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    #: (figure, server) pairs with a round whose value is only a lower bound.
    lower_bounds: set[tuple[str, str]] = field(default_factory=set)

    def add(self, server: str, figures: Sequence[str], values: Values | None) -> None:
        for name in figures:
            per_server = self.values.setdefault(name, {s: [] for s in self.servers})
            per_server[server].append(None if values is None else values.get(name))
            if values and values.get(name + LOWER_BOUND):
                self.lower_bounds.add((name, server))

    def ok(self, figure: str, server: str) -> list[float]:
        return [v for v in self.values.get(figure, {}).get(server, []) if v is not None]

    def median(self, figure: str, server: str) -> float | None:
        ok = self.ok(figure, server)
        return statistics.median(ok) if ok else None

    def ratio(self, figure: str) -> float | None:
        """trionsq's median over the other server's (None without both)."""
        if len(self.servers) < 2:
            return None
        ours, theirs = (self.median(figure, s) for s in self.servers[:2])
        if ours is None or theirs is None or theirs == 0:
            return None
        return ours / theirs

    def ordered(self) -> list[str]:
        """The figures measured, in table order."""
        return [name for name in self.figures if name in self.values]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.ordered():
            fig = self.figures[name]
            entry: dict[str, Any] = {"label": fig.label, "unit": fig.unit}
            for server in self.servers:
                ok = self.ok(name, server)
                entry[server] = {
                    "values": self.values[name][server],
                    "median": self.median(name, server),
                    "min": min(ok) if ok else None,
                    "max": max(ok) if ok else None,
                    "lower_bound": (name, server) in self.lower_bounds,
                }
            entry["ratio"] = self.ratio(name)
            out[name] = entry
        return out


def format_value(value: float | None, decimals: int = 0) -> str:
    """``604,694``; ``0.25`` with decimals; ``-`` for no value."""
    if value is None:
        return "-"
    return f"{value:,.{decimals}f}"


def format_cell(values: Sequence[float | None], decimals: int = 0) -> str:
    """The median of the values, then their min and max (en dash between):
    ``604,694 (590,000-610,000)``; failed rounds are counted: ``(2 of 3 failed)``."""
    ok = [v for v in values if v is not None]
    failed = len(values) - len(ok)
    note = f" ({failed} of {len(values)} failed)" if failed else ""
    if not ok:
        return "error" + note if values else "-"
    text = format_value(statistics.median(ok), decimals)
    if len(ok) > 1:
        text += f" ({format_value(min(ok), decimals)}{_DASH}{format_value(max(ok), decimals)})"
    return text + note


def format_table(results: Results) -> str:
    """The figures, one row each: label and unit, each server's cell, trionsq/go, better."""
    two = len(results.servers) >= 2
    header = ["figure", *results.servers]
    if two:
        header += [f"{results.servers[0]}/{results.servers[1]}", "better"]
    rows = [header]
    for name in results.ordered():
        fig = results.figures[name]
        row = [f"{fig.label} ({fig.unit})"]
        row += [
            format_cell(results.values[name][s], fig.decimals)
            + (" *" if (name, s) in results.lower_bounds else "")
            for s in results.servers
        ]
        if two:
            ratio = results.ratio(name)
            row += [
                "-" if ratio is None else f"{ratio:.2f}",
                "higher" if fig.higher_is_better else "lower",
            ]
        rows.append(row)
    table = _align(rows)
    if results.lower_bounds:
        table += (
            "\n* a lower bound in some round: Go's bench_reader drained the whole backlog before"
            " --runfor ended (it reports backlog / runfor)"
        )
    return table


def _align(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --- running -------------------------------------------------------------------------------


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


#: A background process: Python spinning on one core until it is killed.
_SPIN = ("-c", "while True: pass")


class Background:
    """`count` CPU-bound processes for the duration of a `with` block (a busy machine)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Background:
        for _ in range(self.count):
            self.procs.append(subprocess.Popen([sys.executable, *_SPIN]))
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
        self.procs.clear()


def run_one(measurement: Measurement, server: Server, opts: Options) -> Values | None:
    """One round of `measurement` on a fresh daemon of `server`, beside `opts.background`
    CPU-bound processes; None if it failed (the reason is printed)."""
    with Background(opts.background):
        return _run_one(measurement, server, opts)


def _run_one(measurement: Measurement, server: Server, opts: Options) -> Values | None:
    flags = (*measurement.flags(opts), *opts.nsqd_args)
    try:
        daemon = Daemon(server, flags)
    except BenchError as exc:
        _say(f"    {server.name}: nsqd did not start: {exc}")
        return None
    with daemon:
        _say(f"    {server.name} nsqd pid {daemon.pid} {' '.join(flags)} (load {_load()})")
        try:
            cpu0, wall0 = cpu_seconds(daemon.pid), time.perf_counter()
            values = measurement.run(daemon, opts)
            cores = (cpu_seconds(daemon.pid) - cpu0) / (time.perf_counter() - wall0)
        except (BenchError, OSError, ValueError) as exc:
            _say(f"    {server.name}: FAILED: {daemon.explain(exc)}")
            return None
        _say(f"    {server.name}: nsqd used {cores:.2f} cores on average")
        return values


def run_all(
    measurements: Sequence[Measurement], servers: Sequence[Server], rounds: int, opts: Options
) -> Results:
    """Run the schedule; print each result as it comes; return them all."""
    figures = figures_for(opts.topics, opts.channels, opts.conns)
    results = Results([s.name for s in servers], figures)
    for measurement, round_, server in schedule(measurements, rounds, servers):
        if server is servers[0]:
            _say(f"[{measurement.key}] round {round_ + 1}/{rounds}")
        values = run_one(measurement, server, opts)
        results.add(server.name, measurement.figures, values)
    return results


# --- command line ------------------------------------------------------------------------------


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _only(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in SELECTIONS:
            raise argparse.ArgumentTypeError(
                f"unknown figure {name!r} (one of {', '.join(SELECTIONS)})"
            )
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench/compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_arguments(p)
    p.add_argument("--go-bench-writer", metavar="PATH", help="publish with Go's bench_writer")
    p.add_argument("--go-bench-reader", metavar="PATH", help="deliver with Go's bench_reader")
    p.add_argument("--rounds", type=int, default=3, help="rounds per server (3)")
    p.add_argument("--runfor", type=_duration, default=10.0, help="throughput/latency run (10s)")
    p.add_argument(
        "--only", type=_only, metavar="LIST", help=f"comma-separated: {', '.join(SELECTIONS)}"
    )
    p.add_argument("--procs", type=int, default=2, help="trionsq client processes (2)")
    p.add_argument(
        "--mem-queue-size",
        type=int,
        default=DEFAULT_MEM_QUEUE,
        help=f"the memory-queue configuration's --mem-queue-size ({DEFAULT_MEM_QUEUE})",
    )
    p.add_argument("--memory-count", type=int, default=1_000_000, help="memory: messages (1M)")
    p.add_argument("--topics", type=int, default=10_000, help="idle: topics (10000)")
    p.add_argument("--channels", type=int, default=2, help="idle: channels per topic (2)")
    p.add_argument("--idle-settle", type=_duration, default=5.0, help="idle: settle (5s)")
    p.add_argument("--idle-window", type=_duration, default=10.0, help="idle: window (10s)")
    p.add_argument("--conns", type=int, default=10_000, help="connections: how many (10000)")
    p.add_argument(
        "--output-buffer-size",
        type=int,
        default=-1,
        help="latency consumer's IDENTIFY output_buffer_size (-1: none, no timed flush)",
    )
    p.add_argument(
        "--output-buffer-timeout",
        type=int,
        default=0,
        help="latency consumer's IDENTIFY output_buffer_timeout in ms (0: the daemon's)",
    )
    p.add_argument(
        "--nsqd-arg", action="append", default=[], metavar="FLAG", help="flag for both daemons"
    )
    p.add_argument(
        "--background",
        type=int,
        default=0,
        metavar="N",
        help="N CPU-bound processes beside each round (0)",
    )
    p.add_argument("--json", action="store_true", help="also print one JSON line of figures")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.rounds < 1:
        build_parser().error("--rounds must be at least 1")
    if args.background < 0:
        build_parser().error("--background must be 0 or more")
    return args


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """--go-nsqd and --trionsq-nsqd, which `servers_from` reads."""
    parser.add_argument("--go-nsqd", metavar="PATH", help="Go's nsqd (without it: trionsq alone)")
    parser.add_argument(
        "--trionsq-nsqd",
        metavar="CMD",
        help="trionsq's nsqd command line (default: this Python -m trionsq nsqd)",
    )


def servers_from(args: argparse.Namespace) -> list[Server]:
    """trionsq first, then Go's nsqd if given."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if args.trionsq_nsqd:
        argv: tuple[str, ...] = tuple(shlex.split(args.trionsq_nsqd))
    else:
        argv = (sys.executable, "-m", "trionsq", "nsqd")
    servers = [Server("trionsq", argv, env)]
    if args.go_nsqd:
        servers.append(Server("go", (args.go_nsqd,)))
    return servers


def options_from(args: argparse.Namespace) -> Options:
    return Options(
        runfor=args.runfor,
        clients=Clients(args.go_bench_writer, args.go_bench_reader, args.procs),
        mem_queue_size=args.mem_queue_size,
        memory_count=args.memory_count,
        topics=args.topics,
        channels=args.channels,
        idle_settle=args.idle_settle,
        idle_window=args.idle_window,
        conns=args.conns,
        output_buffer_size=args.output_buffer_size,
        output_buffer_timeout=args.output_buffer_timeout,
        nsqd_args=tuple(args.nsqd_arg),
        background=args.background,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (1 if every round of some figure failed)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    servers = servers_from(args)
    opts = options_from(args)
    measurements = select(args.only)
    load_before = _load()
    _say(f"servers: {'; '.join(f'{s.name}: {shlex.join(s.argv)}' for s in servers)}")
    _say(f"clients: {opts.clients.describe()}; {os.cpu_count()} cores; load {load_before}")
    if opts.background:
        _say(f"background: {opts.background} CPU-bound processes beside each round")
    try:
        from .connections import raise_nofile

        raise_nofile(opts.conns + 256 if "connections" in {m.key for m in measurements} else 0)
        results = run_all(measurements, servers, args.rounds, opts)
    except KeyboardInterrupt:
        return 130
    except BenchError as exc:
        _say(f"compare: {exc}")
        return 1
    load_after = _load()
    print(
        f"{args.rounds} round(s) per server, runfor {args.runfor:g}s; "
        f"load average before {load_before}, after {load_after}"
    )
    print(format_table(results), flush=True)
    if args.json:
        doc = {
            "servers": {s.name: list(s.argv) for s in servers},
            "clients": opts.clients.describe(),
            "rounds": args.rounds,
            "runfor": args.runfor,
            "load_before": load_before,
            "load_after": load_after,
            "figures": results.as_json(),
        }
        print(json.dumps(doc))
    failed = any(not results.ok(name, s) for name in results.values for s in results.servers)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
