"""One trial: start three members, run the load, inject a fault (a `SCENARIOS` entry), undo
it, wait for the set to converge, drain, and check (`checker.check`).

The scenarios (`SCENARIOS`, by name; ``bench/faults --faults`` also takes the group names
of `GROUPS`) are listed in tests/faults/README.md.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import nemesis
from .checker import check, check_traces
from .cluster import (
    BACKLOG_CHANNEL,
    CHANNEL,
    TOPIC,
    Cluster,
    Member,
    Netns,
    netns_unavailable,
)
from .load import FaultEvent, History, Load


class Unavailable(Exception):
    """The scenario cannot run here (no network namespaces, no FUSE): the reason."""


@dataclass
class TrialOptions:
    seed: int = 0
    #: seconds of load before the fault, at random in this range (after 20 acknowledgements)
    warmup: tuple[float, float] = (1.0, 2.0)
    rate: float = 1500.0
    rdy: int = 50
    drain_timeout: float = 40.0
    recovery_timeout: float = 30.0
    #: "auto": namespaces only for the scenarios that cut links; "netns": always
    network: str = "auto"
    #: flags added to every member's (``--msg-timeout``: a message whose consumer connection
    #: died comes back within the drain)
    extra_args: list[str] = field(default_factory=lambda: ["--msg-timeout=5s"])
    command: list[str] | None = None
    #: keep the temporary directory (data, logs) instead of removing it
    keep: bool = False
    #: each member writes a replication trace, replayed against the spec at the end
    #: (``trace_violation``); only with trionsq's nsqd (no `command`, no TRIONSQ_FAULTS_NSQD)
    trace: bool = True
    log: Callable[[str], None] | None = None


@dataclass
class TrialResult:
    fault: str
    seed: int
    figures: dict[str, Any]
    logs: str = ""
    root: Path | None = None


class Context:
    """What a scenario works with."""

    def __init__(
        self,
        cluster: Cluster,
        history: History,
        rng: random.Random,
        netns: Netns | None,
        disks: list[Any],
        options: TrialOptions,
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.netns = netns
        self.disks = disks
        self.options = options

    @property
    def members(self) -> list[Member]:
        return self.cluster.members

    def say(self, text: str) -> None:
        if self.options.log is not None:
            self.options.log(text)

    def primary(self, timeout: float = 20.0) -> Member:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            primary = self.cluster.primary()
            if primary is not None:
                return primary
            time.sleep(0.05)
        raise AssertionError(f"no primary within {timeout} s")

    def replica(self, primary: Member) -> Member:
        return self.rng.choice([m for m in self.members if m is not primary])

    def record(
        self, kind: str, victims: list[Member], primary: Member | None, *, failover: bool
    ) -> FaultEvent:
        info = primary.replication() if primary is not None else None
        event = FaultEvent(
            time.monotonic(),
            kind,
            [m.index for m in victims],
            primary.index if primary is not None else None,
            int(info["epoch"]) if info and info.get("epoch") is not None else None,
            failover=failover,
        )
        with self.history.lock:
            self.history.faults.append(event)
        self.say(f"{kind}: {', '.join(m.name for m in victims)}")
        return event

    def note(self, event: FaultEvent, detail: str) -> None:
        event.detail = (event.detail + "; " if event.detail else "") + detail
        self.say(f"  {detail}")

    def sleep(self, low: float, high: float | None = None) -> None:
        time.sleep(low if high is None else self.rng.uniform(low, high))

    def wait_converged(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.cluster.converged():
                return True
            time.sleep(0.1)
        return False


# -- scenarios -------------------------------------------------------------------------------


def _kill(ctx: Context, which: str) -> None:
    primary = ctx.primary()
    if which == "primary":
        victims = [primary]
    elif which == "replica":
        victims = [ctx.replica(primary)]
    else:
        victims = list(ctx.members)
    event = ctx.record(f"kill-{which}", victims, primary, failover=which != "replica")
    nemesis.kill(victims)
    event.injected = time.monotonic()
    ctx.sleep(0.5, 2.0)
    nemesis.restart(ctx.cluster, victims)


def _stop(ctx: Context, seconds: float) -> None:
    primary = ctx.primary()
    event = ctx.record(f"stop-primary-{seconds:g}s", [primary], primary, failover=True)
    nemesis.pause(primary)
    event.injected = time.monotonic()
    try:
        ctx.sleep(seconds)
    finally:
        nemesis.resume(primary)


def _partition(ctx: Context, shape: str) -> None:
    assert ctx.netns is not None
    primary = ctx.primary()
    p = primary.index
    replicas = [m.index for m in ctx.members if m is not primary]
    cuts: list[tuple[int | str, int | str]]
    if shape == "partition-primary":
        cuts = [(p, r) for r in replicas]
        victims, failover = [primary], True
    elif shape == "isolate-primary":
        cuts = [(p, r) for r in replicas] + [(p, "root")]
        victims, failover = [primary], True
    elif shape == "isolate-replica":
        r = ctx.rng.choice(replicas)
        others = [m.index for m in ctx.members if m.index != r]
        cuts = [(r, o) for o in others] + [(r, "root")]
        victims, failover = [ctx.members[r]], False
    else:  # bridge
        r = ctx.rng.choice(replicas)
        cuts = [(p, r)]
        victims, failover = [primary, ctx.members[r]], False
    event = ctx.record(shape, victims, primary, failover=failover)
    ctx.note(event, "cut " + ", ".join(f"{a}-{b}" for a, b in cuts))
    nemesis.partition(ctx.netns, ctx.history, cuts)
    event.injected = time.monotonic()
    try:
        ctx.sleep(8.0)
    finally:
        nemesis.heal(ctx.netns, ctx.history)


def _then_kill_primary(ctx: Context, avoid: Member | None = None) -> None:
    """Once the damaged member is back in the epoch, kill the primary (unless it is the
    damaged one) so that the damaged member stands in the election."""
    if not ctx.wait_converged(ctx.options.recovery_timeout):
        ctx.say("  the set did not converge after the restart; killing the primary anyway")
    ctx.sleep(1.0)
    primary = ctx.primary()
    if primary is avoid:
        ctx.say("  the damaged member is the primary: no second kill")
        return
    event = ctx.record("kill-primary", [primary], primary, failover=True)
    nemesis.kill([primary])
    event.injected = time.monotonic()
    ctx.sleep(0.5, 2.0)
    nemesis.restart(ctx.cluster, [primary])


def _damage(ctx: Context, mode: str, kind: str) -> None:
    primary = ctx.primary()
    victim = primary if kind == "segment" else ctx.replica(primary)
    event = ctx.record(f"{mode}-{kind}", [victim], primary, failover=victim is primary)
    nemesis.kill([victim])
    event.injected = time.monotonic()
    ctx.note(event, nemesis.corrupt(victim.data, kind, mode, ctx.rng))
    ctx.sleep(0.3, 1.0)
    nemesis.restart(ctx.cluster, [victim])
    _then_kill_primary(ctx, victim)


def _wipe(ctx: Context) -> None:
    primary = ctx.primary()
    victim = ctx.replica(primary)
    event = ctx.record("wipe", [victim], primary, failover=False)
    nemesis.kill([victim])
    event.injected = time.monotonic()
    ctx.note(event, nemesis.wipe(victim.data))
    ctx.sleep(0.3, 1.0)
    nemesis.restart(ctx.cluster, [victim])
    _then_kill_primary(ctx, victim)


def _power_cut(ctx: Context) -> None:
    primary = ctx.primary()
    event = ctx.record("power-cut", list(ctx.members), primary, failover=True)
    nemesis.kill(ctx.members)
    event.injected = time.monotonic()
    for disk in ctx.disks:
        ctx.note(event, disk.power_cut(ctx.rng, tear=True))
    ctx.sleep(0.5, 1.5)
    for disk in ctx.disks:
        disk.mount(seed=ctx.rng.randrange(1 << 30))
    nemesis.restart(ctx.cluster, ctx.members)


@dataclass
class Scenario:
    run: Callable[[Context], None]
    netns: bool = False
    fuse: bool = False
    extra_args: tuple[str, ...] = ()
    #: a second channel consumed only at the drain (data faults: what they damage is live)
    backlog: bool = False


SCENARIOS: dict[str, Scenario] = {
    "kill-primary": Scenario(lambda c: _kill(c, "primary")),
    "kill-replica": Scenario(lambda c: _kill(c, "replica")),
    "kill-all": Scenario(lambda c: _kill(c, "all")),
    "stop-primary-6s": Scenario(lambda c: _stop(c, 6.0)),
    "stop-primary-10s": Scenario(lambda c: _stop(c, 10.0)),
    "partition-primary": Scenario(lambda c: _partition(c, "partition-primary"), netns=True),
    "isolate-primary": Scenario(lambda c: _partition(c, "isolate-primary"), netns=True),
    "isolate-replica": Scenario(lambda c: _partition(c, "isolate-replica"), netns=True),
    "bridge": Scenario(lambda c: _partition(c, "bridge"), netns=True),
    "flip-log": Scenario(lambda c: _damage(c, "flip", "log"), backlog=True),
    "truncate-log": Scenario(lambda c: _damage(c, "truncate", "log"), backlog=True),
    "flip-fin": Scenario(lambda c: _damage(c, "flip", "fin"), backlog=True),
    "truncate-fin": Scenario(lambda c: _damage(c, "truncate", "fin"), backlog=True),
    "flip-segment": Scenario(lambda c: _damage(c, "flip", "segment"), backlog=True),
    "truncate-segment": Scenario(lambda c: _damage(c, "truncate", "segment"), backlog=True),
    "wipe": Scenario(_wipe, backlog=True),
    "power-cut": Scenario(_power_cut, fuse=True, extra_args=("--sync-ack",), backlog=True),
}

GROUPS = {
    "kill": ["kill-primary", "kill-replica", "kill-all"],
    "stop": ["stop-primary-6s", "stop-primary-10s"],
    "partition": ["partition-primary", "isolate-primary", "isolate-replica", "bridge"],
    "corrupt": [
        "flip-log",
        "truncate-log",
        "flip-fin",
        "truncate-fin",
        "flip-segment",
        "truncate-segment",
    ],
    "flip": ["flip-log", "flip-fin", "flip-segment"],
    "truncate": ["truncate-log", "truncate-fin", "truncate-segment"],
    "wipe": ["wipe"],
    "power": ["power-cut"],
}


def expand(names: str) -> list[str]:
    """Scenario names from a comma-separated list of names and group names ("all")."""
    chosen: list[str] = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        found = list(SCENARIOS) if name == "all" else GROUPS.get(name, [name])
        for scenario in found:
            if scenario not in SCENARIOS:
                raise ValueError(f"unknown fault {scenario!r} (known: {', '.join(SCENARIOS)})")
            if scenario not in chosen:
                chosen.append(scenario)
    return chosen


def unavailable(name: str) -> str | None:
    """Why scenario `name` cannot run here (None: it can)."""
    scenario = SCENARIOS[name]
    if scenario.netns:
        reason = netns_unavailable()
        if reason:
            return reason
    if scenario.fuse:
        from .fusedisk import fuse_unavailable

        return fuse_unavailable()
    return None


def _setup_topic(cluster: Cluster, rng: random.Random, channels: tuple[str, ...]) -> None:
    first = rng.choice(cluster.members)
    deadline = time.monotonic() + 30
    while first.post(f"/topic/create?topic={TOPIC}") != 200:
        if time.monotonic() > deadline:
            raise AssertionError("POST /topic/create never answered 200")
        time.sleep(0.2)
    while not cluster.converged():
        if time.monotonic() > deadline:
            raise AssertionError("the set did not elect a primary within 30 s")
        time.sleep(0.1)
    for channel in channels:
        while True:
            primary = cluster.primary()
            if primary is not None and (
                primary.post(f"/channel/create?topic={TOPIC}&channel={channel}") == 200
            ):
                break
            if time.monotonic() > deadline:
                raise AssertionError("POST /channel/create never answered 200")
            time.sleep(0.2)


def run_trial(name: str, options: TrialOptions | None = None) -> TrialResult:
    """Run scenario `name` once; raises `Unavailable` if it cannot run here."""
    options = options or TrialOptions()
    scenario = SCENARIOS[name]
    reason = unavailable(name)
    if reason:
        raise Unavailable(reason)
    rng = random.Random(f"{name}/{options.seed}")
    root = Path(tempfile.mkdtemp(prefix="trionsq-faults-"))
    netns: Netns | None = None
    disks: list[Any] = []
    cluster: Cluster | None = None
    load: Load | None = None
    channels = (CHANNEL, BACKLOG_CHANNEL) if scenario.backlog else (CHANNEL,)
    history = History(tag=f"{name}.{options.seed}", members=3, channels=channels)
    figures: dict[str, Any] = {}
    logs = ""
    try:
        if scenario.netns or options.network == "netns":
            netns = Netns()
            netns.setup()
        data_dirs = None
        if scenario.fuse:
            from .fusedisk import FuseDisk

            for i in range(3):
                n = i + 1
                disk = FuseDisk(root / f"disk{n}", root / f"n{n}", root / f"fuse{n}.log")
                disks.append(disk)
                disk.mount()
            data_dirs = [disk.mountpoint for disk in disks]
        cluster = Cluster(
            root,
            netns,
            extra_args=[*options.extra_args, *scenario.extra_args],
            command=options.command,
            data_dirs=data_dirs,
            trace=options.trace
            and options.command is None
            and not os.environ.get("TRIONSQ_FAULTS_NSQD"),
        )
        cluster.start()
        _setup_topic(cluster, rng, channels)
        load = Load(history, cluster.members, rng, rate=options.rate, rdy=options.rdy)
        load.start()
        deadline = time.monotonic() + 20
        while len(history.acked()) < 20:
            if time.monotonic() > deadline:
                raise AssertionError("fewer than 20 publishes acknowledged in 20 s of load")
            time.sleep(0.05)
        time.sleep(rng.uniform(*options.warmup))
        ctx = Context(cluster, history, rng, netns, disks, options)
        scenario.run(ctx)
        healed = time.monotonic()
        converged = ctx.wait_converged(options.recovery_timeout)
        figures["converged_s"] = round(time.monotonic() - healed, 3) if converged else None
        time.sleep(1.0)
        load.stop_publishers()
        if scenario.backlog:
            load.start_backlog()
        deadline = time.monotonic() + options.drain_timeout
        while not history.drained() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        load.stop()
        figures = {**check(history, options.rdy), **figures}
        figures["faults"] = [
            {"kind": f.kind, "victims": [v + 1 for v in f.victims], "detail": f.detail}
            for f in history.faults
        ]
    except Unavailable:
        raise
    except Exception as exc:
        figures["error"] = f"{type(exc).__name__}: {exc}"
        if load is not None:
            load.stop()
        if history.faults or history.deliveries:
            figures = {**check(history, options.rdy), **figures}
    finally:
        if load is not None:
            load.stop()
        if cluster is not None:
            cluster.close()
            logs = "\n".join(m.log_tail(25, notable=True) for m in cluster.members)
            if cluster.traces():
                figures.update(check_traces(cluster.traces()))
        for disk in disks:
            disk.close()
        if netns is not None:
            netns.close()
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    return TrialResult(name, options.seed, figures, logs, root if options.keep else None)
