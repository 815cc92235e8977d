"""`trionsq bench`: throughput, latency and memory figures for nsqd (trionsq's or Go's).

Modes, as subcommands (``all`` when none is given):

* ``writer``  publish throughput: MPUB batches from several processes (NSQ's bench_writer);
* ``reader``  delivery throughput: SUB + RDY + FIN from several processes (bench_reader);
* ``latency`` publish-to-delivery latency percentiles at a fixed publish rate;
* ``memory``  nsqd's RSS growth per queued message;
* ``hostile`` nsqd's RSS with slow or abandoned PUB bodies and idle connections open, and
  after they close (is the memory given back?);
* ``ceiling`` the bench clients' own limits, against a fake server that does nothing;
* ``transports`` delivery throughput over plaintext, snappy, deflate and TLS in one run,
  each as a ratio of plaintext (the reader with ``--transport``, one after the other);
* ``all``     writer, reader (draining what the writer left), latency, memory, and a summary.

Without ``--nsqd-tcp-address`` each mode starts its own ``trionsq nsqd`` on a free port.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

from .common import BenchError, cpu_seconds, parse_address, parse_duration
from .transports import TRANSPORTS, TransportSpec

MODES = ("writer", "reader", "latency", "memory", "hostile", "ceiling", "transports", "all")

#: Go nsqd 1.3 on this 2-core machine, and what trionsq aims for.
GO_FIGURES = {"publish": 620_000, "deliver": 480_000, "bytes_per_msg": 254, "p99_us": 160}
TARGETS = {"publish": 300_000, "deliver": 240_000, "bytes_per_msg": 250, "p99_us": 400}


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    value = int(text.replace("_", "").replace(",", ""))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _count(text: str) -> int:
    value = int(text.replace("_", "").replace(",", ""))
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _transport_list(text: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in TRANSPORTS:
            raise argparse.ArgumentTypeError(f"unknown transport {name!r} (one of {TRANSPORTS})")
    if "plain" in names:
        names.remove("plain")
    return ("plain", *names)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("nsqd")
    g.add_argument(
        "--nsqd-tcp-address",
        metavar="HOST:PORT",
        help="nsqd to measure (default: start a trionsq nsqd on a free port)",
    )
    g.add_argument("--nsqd-http-address", metavar="HOST:PORT", help="its HTTP address (optional)")
    g.add_argument("--nsqd-pid", type=int, help="pid of that nsqd (memory and hostile modes)")
    g.add_argument(
        "--nsqd-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag for the nsqd the bench starts (repeatable), "
        "e.g. --nsqd-arg=--mem-queue-size=100000",
    )
    b = common.add_argument_group("load")
    b.add_argument("--topic", help="topic (default: sub_bench; latency_bench; memory_bench)")
    b.add_argument("--channel", default="ch", help="channel (default: ch)")
    b.add_argument("--size", type=_positive_int, default=100, help="message body size (100)")
    b.add_argument("--batch-size", type=_positive_int, default=200, help="messages per MPUB (200)")
    b.add_argument(
        "--runfor", type=_duration, default=10.0, help="duration of a run, e.g. 10s (10s)"
    )
    b.add_argument("--procs", type=_positive_int, default=2, help="client processes (2)")
    b.add_argument("--rdy", type=_positive_int, default=2500, help="RDY per reader (2500)")
    b.add_argument(
        "--count",
        type=_count,
        default=0,
        help="messages: writer stops after, reader stops once consumed, latency sends "
        "(default rate*runfor), memory queues (default 1,000,000)",
    )
    b.add_argument(
        "--inflight",
        type=_positive_int,
        default=1,
        help="outstanding MPUBs per writer connection (1 = wait for each OK, like Go's)",
    )
    b.add_argument("--rate", type=float, default=5000.0, help="latency: PUBs per second (5000)")
    b.add_argument(
        "--warmup", type=_count, default=1000, help="latency: first samples dropped (1000)"
    )
    b.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    b.add_argument(
        "--ceiling-kind",
        choices=("writer", "reader", "both"),
        default="both",
        help="ceiling: which client",
    )
    h = common.add_argument_group("hostile")
    h.add_argument(
        "--conns", type=_count, default=300, help="connections with a partial PUB body (300)"
    )
    h.add_argument(
        "--idle-conns", type=_count, default=2000, help="idle connections, magic only (2000)"
    )
    h.add_argument(
        "--declared-size",
        type=_positive_int,
        default=1024 * 1024,
        help="the PUB body size the connections declare (1048576)",
    )
    h.add_argument(
        "--partial",
        type=_count,
        default=None,
        help="body bytes each connection sends (default: half the declared size)",
    )
    h.add_argument(
        "--piece",
        type=_count,
        default=65536,
        help="send the partial body in pieces of this many bytes, round-robin over the "
        "connections; 0: each connection sends it at once (65536)",
    )
    h.add_argument(
        "--settle",
        type=_duration,
        default=3.0,
        help="wait after the connections closed before reading RSS (3s)",
    )
    h.add_argument(
        "--reset", action="store_true", help="close the connections with a reset (SO_LINGER 0)"
    )
    t = common.add_argument_group("transports (TLS, snappy, deflate)")
    t.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="plain",
        help="reader: what its connections negotiate in IDENTIFY (plain)",
    )
    t.add_argument(
        "--transports",
        type=_transport_list,
        default=("plain", "snappy", "deflate", "tls"),
        metavar="LIST",
        help="transports mode: the transports to compare, comma-separated "
        "(plain,snappy,deflate,tls; plain is always measured first)",
    )
    t.add_argument(
        "--deflate-level", type=int, default=6, help="deflate level the reader asks for (6)"
    )
    t.add_argument(
        "--tls-root-ca-file",
        metavar="FILE",
        help="CA to verify a given nsqd's certificate (default: not verified; the bench's own "
        "nsqd gets a trustme certificate)",
    )
    t.add_argument(
        "--rounds",
        type=_positive_int,
        default=1,
        help="transports mode: measure every transport this many times, alternating (1)",
    )

    parser = argparse.ArgumentParser(
        prog="trionsq bench",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="mode", metavar="MODE")
    helps = {
        "writer": "publish throughput (MPUB)",
        "reader": "delivery throughput (SUB/RDY/FIN)",
        "latency": "publish-to-delivery latency",
        "memory": "nsqd RSS per queued message",
        "hostile": "nsqd RSS with partial PUB bodies and idle connections, and after close",
        "ceiling": "the bench clients' own limits against a fake server",
        "transports": "delivery throughput over plaintext, snappy, deflate and TLS",
        "all": "writer, reader, latency and memory, with a summary (default)",
    }
    for mode in MODES:
        sub.add_parser(mode, parents=[common], help=helps[mode])
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    if not argv or (argv[0] not in MODES and argv[0] not in ("-h", "--help")):
        argv.insert(0, "all")
    return build_parser().parse_args(argv)


class _Nsqd:
    """The nsqd under test: given by address, or a trionsq nsqd started for the bench."""

    def __init__(
        self,
        args: argparse.Namespace,
        stack: ExitStack,
        extra: Sequence[str] = (),
        tls: bool = False,
    ):
        self.pid: int | None = args.nsqd_pid
        self.http: tuple[str, int] | None = None
        self.own = args.nsqd_tcp_address is None
        self.daemon: Any = None
        #: The CA the TLS clients trust (None: they do not verify).
        self.ca_file: str | None = args.tls_root_ca_file
        if not self.own:
            self.tcp = parse_address(args.nsqd_tcp_address)
            if args.nsqd_http_address:
                self.http = parse_address(args.nsqd_http_address, 4151)
            return
        from trionsq.testing import DaemonProcess, pythonpath_env

        if tls:
            extra = [*extra, *self._certificate(stack)]
        try:
            daemon = DaemonProcess("nsqd", args=[*args.nsqd_arg, *extra], env=pythonpath_env())
        except RuntimeError as exc:  # it exited (or hung) at start-up: say why, in one line
            lines = str(exc).splitlines()
            fatal = [line.split(" FATAL: ", 1)[1] for line in lines if " FATAL: " in line]
            head = lines[0].rstrip(":")
            raise BenchError(f"{head}: {fatal[-1]}" if fatal else head) from None
        stack.callback(daemon.close)
        self.daemon = daemon
        self.tcp = daemon.tcp_address
        self.http = daemon.http_address
        self.pid = daemon.proc.pid
        host, port = self.tcp
        _say(f"started trionsq nsqd pid {self.pid} on {host}:{port} {' '.join(extra)}")

    def _certificate(self, stack: ExitStack) -> list[str]:
        """A trustme CA and certificate for the bench's own nsqd: its flags."""
        import tempfile

        try:
            import trustme
        except ImportError:
            raise BenchError("TLS with the bench's own nsqd needs trustme") from None
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="trionsq-bench-"))
        ca = trustme.CA()
        self.ca_file = os.path.join(directory, "ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        pem = os.path.join(directory, "nsqd.pem")
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(pem)
        return [f"--tls-cert={pem}", f"--tls-key={pem}", "--https-address=127.0.0.1:0"]

    def check(self, error: BenchError) -> BenchError:
        """`error`, with the daemon's exit status and last log lines if it died."""
        daemon = self.daemon
        if daemon is None or daemon.proc.poll() is None:
            return error
        tail = "".join(daemon.stderr_lines[-60:])
        code = daemon.proc.returncode
        return BenchError(f"{error}\nnsqd exited with {code}; its log ends:\n{tail}")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _run_writer(args: argparse.Namespace, nsqd: _Nsqd, topic: str) -> Any:
    from . import writer

    return writer.run(
        nsqd.tcp,
        topic,
        size=args.size,
        batch_size=args.batch_size,
        runfor=args.runfor,
        procs=args.procs,
        count=args.count,
        inflight=args.inflight,
    )


def _run_reader(
    args: argparse.Namespace, nsqd: _Nsqd, topic: str, count: int, transport: str | None = None
) -> Any:
    from . import reader

    spec = TransportSpec(
        transport or args.transport, deflate_level=args.deflate_level, tls_ca_file=nsqd.ca_file
    )
    return reader.run(
        nsqd.tcp,
        topic,
        args.channel,
        size=args.size,
        rdy=args.rdy,
        runfor=args.runfor,
        procs=args.procs,
        count=count,
        transport=spec,
    )


def _transports_count(args: argparse.Namespace) -> int:
    return args.count or 500_000


def _run_transports(args: argparse.Namespace, stack: ExitStack) -> dict[str, Any]:
    """For each transport (plain first), on one nsqd: publish `count` messages to a fresh
    topic, then measure the reader draining them over that transport. Every message is kept in
    memory (``--mem-queue-size=<count>``), so that the figures compare the connections'
    costs, not the disk queue's."""
    names = args.transports
    extra = []
    if not any(a.startswith("--mem-queue-size") for a in args.nsqd_arg):
        extra.append(f"--mem-queue-size={_transports_count(args)}")
    nsqd = _Nsqd(args, stack, extra, tls=any(n.startswith("tls") for n in names))
    count = _transports_count(args)
    runs: dict[str, list[Any]] = {name: [] for name in names}
    cores: dict[str, list[float]] = {name: [] for name in names}
    stamp = int(time.time())
    for round_ in range(args.rounds):
        for name in names:
            topic = f"{args.topic or 'transport_bench'}_{stamp}_{round_}_{name.replace('+', '_')}"
            wargs = argparse.Namespace(**{**vars(args), "count": count})
            _measure({}, "writer", nsqd, functools.partial(_run_writer, wargs, nsqd, topic))
            cpu0 = _daemon_cpu(nsqd)
            result = _measure(
                {},
                f"reader ({name})",
                nsqd,
                functools.partial(_run_reader, args, nsqd, topic, count, name),
            )
            cpu1 = _daemon_cpu(nsqd)
            runs[name].append(result)
            if cpu0 is not None and cpu1 is not None:
                cores[name].append((cpu1 - cpu0) / max(result.elapsed, 1e-9))
    print()
    print(_transports_summary(runs, cores), flush=True)
    return {f"reader_{name.replace('+', '_')}": _median_run(r) for name, r in runs.items()}


def _median_run(results: list[Any]) -> Any:
    return sorted(results, key=lambda r: r.rate)[len(results) // 2]


def _transports_summary(runs: dict[str, list[Any]], cores: dict[str, list[float]]) -> str:
    plain = _median_run(runs["plain"]).rate or 1e-9
    rows = [("transport", "deliver (msg/s)", "vs plain", "nsqd cores", "client cores")]
    for name, results in runs.items():
        best = _median_run(results)
        used = sorted(cores[name])
        client = best.client_cpu / best.elapsed if best.elapsed else 0.0
        rows.append(
            (
                name,
                " / ".join(f"{r.rate:,.0f}" for r in results),
                f"{best.rate / plain:.2f}",
                f"{used[len(used) // 2]:.2f}" if used else "",
                f"{client:.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                for i, cell in enumerate(row)
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _run_latency(args: argparse.Namespace, nsqd: _Nsqd, topic: str) -> Any:
    from . import latency

    count = args.count or int(args.rate * args.runfor) or 10_000
    return latency.run(
        nsqd.tcp,
        topic,
        args.channel,
        size=args.size,
        rate=args.rate,
        count=count,
        rdy=args.rdy,
        warmup=args.warmup,
    )


def _memory_count(args: argparse.Namespace) -> int:
    return args.count or 1_000_000


def _run_memory(args: argparse.Namespace, nsqd: _Nsqd, topic: str) -> Any:
    from . import memory

    if nsqd.pid is None:
        raise BenchError("memory mode needs --nsqd-pid with --nsqd-tcp-address")
    return memory.run(
        nsqd.tcp,
        nsqd.pid,
        topic,
        size=args.size,
        batch_size=args.batch_size,
        count=_memory_count(args),
        http_address=nsqd.http,
    )


def _run_hostile(args: argparse.Namespace, nsqd: _Nsqd, results: dict[str, Any]) -> None:
    from . import hostile

    if nsqd.pid is None:
        raise BenchError("hostile mode needs --nsqd-pid with --nsqd-tcp-address")
    pid = nsqd.pid
    try:
        phases = hostile.run(
            nsqd.tcp,
            pid,
            args.topic or "hostile_bench",
            conns=args.conns,
            declared=args.declared_size,
            partial=args.partial,
            piece=args.piece,
            idle_conns=args.idle_conns,
            settle=args.settle,
            reset=args.reset,
        )
    except BenchError as exc:
        raise nsqd.check(exc) from None
    for phase in phases:
        results["hostile_idle" if phase.idle else "hostile_partial"] = phase
        print(phase.line(), flush=True)


def _memory_daemon_args(args: argparse.Namespace) -> list[str]:
    if any(a.startswith("--mem-queue-size") for a in args.nsqd_arg):
        return []
    return [f"--mem-queue-size={_memory_count(args)}"]


def _summary(results: dict[str, Any]) -> str:
    rows = [("figure", "trionsq", "target", "Go nsqd 1.3")]
    if "writer" in results:
        rows.append(
            (
                "publish (msg/s)",
                f"{results['writer'].rate:,.0f}",
                f">= {TARGETS['publish']:,}",
                f"{GO_FIGURES['publish']:,}",
            )
        )
    if "reader" in results:
        rows.append(
            (
                "deliver (msg/s)",
                f"{results['reader'].rate:,.0f}",
                f">= {TARGETS['deliver']:,}",
                f"{GO_FIGURES['deliver']:,}",
            )
        )
    if "latency" in results:
        lat = results["latency"]
        rows.append(("e2e p50 (µs)", f"{lat.p50:,.0f}", "", ""))
        rows.append(
            (
                "e2e p99 (µs)",
                f"{lat.p99:,.0f}",
                f"<= {TARGETS['p99_us']}",
                str(GO_FIGURES["p99_us"]),
            )
        )
        rows.append(("e2e p99.9 (µs)", f"{lat.p999:,.0f}", "", ""))
    if "memory" in results:
        rows.append(
            (
                "RSS per queued msg (B)",
                f"{results['memory'].per_message:,.0f}",
                f"<= {TARGETS['bytes_per_msg']}",
                str(GO_FIGURES["bytes_per_msg"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                for i, cell in enumerate(row)
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _jsonable(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, r in results.items():
        d = asdict(r)
        for extra in ("rate", "delta", "per_message", "ratio"):
            if hasattr(r, extra) and extra not in d:
                d[extra] = getattr(r, extra)
        out[name] = d
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the mode `args.mode`; print each figure as it comes; return the results."""
    results: dict[str, Any] = {}
    mode = args.mode
    load = os.getloadavg()
    # Other work on the machine skews every figure: say how busy it was.
    _say(f"load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    with ExitStack() as stack:
        if mode == "ceiling":
            from . import ceiling

            kinds = ("writer", "reader") if args.ceiling_kind == "both" else (args.ceiling_kind,)
            for kind in kinds:
                r = ceiling.run(
                    kind,
                    size=args.size,
                    batch_size=args.batch_size,
                    runfor=args.runfor,
                    procs=args.procs,
                    inflight=args.inflight,
                    rdy=args.rdy,
                )
                results[f"{kind}_ceiling"] = r
                print(r.line(f"{kind} ceiling ({args.procs} procs)"), flush=True)
            return results
        if mode == "transports":
            results.update(_run_transports(args, stack))
            return results
        if mode == "hostile":
            nsqd = _Nsqd(args, stack)
            _run_hostile(args, nsqd, results)
            return results
        if mode == "memory":
            nsqd = _Nsqd(args, stack, _memory_daemon_args(args))
            topic = args.topic or f"memory_bench_{int(time.time())}"
            _measure(results, "memory", nsqd, lambda: _run_memory(args, nsqd, topic))
            return results
        nsqd = _Nsqd(args, stack, tls=args.transport.startswith("tls"))
        if mode == "latency":
            topic = args.topic or "latency_bench"
            _measure(results, "latency", nsqd, lambda: _run_latency(args, nsqd, topic))
            return results
        topic = args.topic or "sub_bench"
        if mode == "all" or mode == "writer" or (mode == "reader" and nsqd.own):
            # A daemon the bench started is empty: fill it before measuring the reader.
            _measure(results, "writer", nsqd, lambda: _run_writer(args, nsqd, topic))
        if mode in ("reader", "all"):
            count = results["writer"].msgs if "writer" in results else args.count
            _measure(results, "reader", nsqd, lambda: _run_reader(args, nsqd, topic, count))
        if mode == "reader" or mode == "writer":
            return results
        lat_topic = f"{topic}_latency"
        _measure(results, "latency", nsqd, lambda: _run_latency(args, nsqd, lat_topic))
    # memory: on a fresh daemon (or the given one, with its pid)
    with ExitStack() as stack:
        if args.nsqd_tcp_address is not None and args.nsqd_pid is None:
            _say("memory: skipped (give --nsqd-pid to measure the given nsqd)")
        else:
            nsqd = _Nsqd(args, stack, _memory_daemon_args(args))
            mem_topic = f"memory_bench_{int(time.time())}"
            _measure(results, "memory", nsqd, lambda: _run_memory(args, nsqd, mem_topic))
    print()
    print(_summary(results), flush=True)
    return results


def _measure(results: dict[str, Any], name: str, nsqd: _Nsqd, fn: Callable[[], Any]) -> Any:
    """Run one measurement, print its line, keep its result (returned); explain a dead
    daemon."""
    cpu0 = _daemon_cpu(nsqd)
    wall0 = time.perf_counter()
    try:
        result = fn()
    except BenchError as exc:
        raise nsqd.check(exc) from None
    wall = time.perf_counter() - wall0
    cpu1 = _daemon_cpu(nsqd)
    results[name] = result
    print(result.line(), flush=True)
    # Where the CPU went: on 2 cores the clients must leave the daemon its core.
    notes = []
    if cpu0 is not None and cpu1 is not None:
        notes.append(f"nsqd {(cpu1 - cpu0) / wall:.2f} cores over {wall:.1f}s (incl. set-up)")
    client_cpu = getattr(result, "client_cpu", None)
    if client_cpu:
        notes.append(f"clients {client_cpu / result.elapsed:.2f} cores while measuring")
    if notes:
        _say(f"{name}: CPU used: " + ", ".join(notes))
    return result


def _daemon_cpu(nsqd: _Nsqd) -> float | None:
    if nsqd.pid is None:
        return None
    try:
        return cpu_seconds(nsqd.pid)
    except OSError:  # not on this machine, or gone
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``trionsq bench``; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        results = run(args)
    except BenchError as exc:
        _say(f"bench: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps({"mode": args.mode, "pid": os.getpid(), **_jsonable(results)}))
    return 0


__all__ = ["GO_FIGURES", "MODES", "TARGETS", "build_parser", "main", "parse_args", "run"]
