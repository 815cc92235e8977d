"""The harness behind ``python -m fuzz``: seeding corpora, running targets under atheris in
subprocesses, replaying saved inputs, and an engine-less smoke run for CI."""

from __future__ import annotations

import hashlib
import os
import random
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .targets import TARGETS, load

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"
CRASHES = ROOT / "crashes"
REGRESSIONS = ROOT / "regressions"
LOGS = ROOT / "logs"

#: libFuzzer options every run gets: inputs up to 8 KiB, RSS capped (no unbounded allocation
#: from a length field), a 10 s per-input timeout (a hang is a finding).
LIBFUZZER_ARGS = ["-max_len=8192", "-rss_limit_mb=1024", "-timeout=10", "-print_final_stats=1"]


def seed(targets: list[str] | None = None) -> dict[str, int]:
    """Write each target's seeds into fuzz/corpus/<target>/seed-<sha1>; returns the counts."""
    counts = {}
    for name in targets or list(TARGETS):
        directory = CORPUS / name
        directory.mkdir(parents=True, exist_ok=True)
        inputs = load(name).seeds()
        for data in inputs:
            (directory / f"seed-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
        counts[name] = len(inputs)
    return counts


def saved_inputs(name: str, crashes: bool = True) -> Iterator[Path]:
    """Regression inputs of a target (fuzz/regressions/<target>/*) and, with `crashes`, its
    unfixed crash artifacts (fuzz/crashes/<target>/*)."""
    dirs = [REGRESSIONS / name] + ([CRASHES / name] if crashes else [])
    for directory in dirs:
        if directory.is_dir():
            yield from sorted(p for p in directory.iterdir() if p.is_file())


def replay(targets: list[str] | None = None, crashes: bool = True) -> list[tuple[Path, str]]:
    """Run every saved input through its target in-process; returns the failures."""
    failures = []
    for name in targets or list(TARGETS):
        target = load(name)
        for path in saved_inputs(name, crashes):
            try:
                target.test_one_input(path.read_bytes())
            except Exception:
                failures.append((path, traceback.format_exc()))
    return failures


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """A libFuzzer-like mutation of `data` (without coverage feedback)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(8)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 3 and buf:
            buf[min(pos, len(buf) - 1)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, 10, 13, 32))
        elif op == 4:
            other = rng.choice(pool)
            start = rng.randrange(len(other) + 1)
            buf[pos:pos] = other[start : start + rng.randint(1, 64)]
        elif op == 5:
            del buf[pos:]
        elif op == 6 and len(buf) >= 4:
            at = rng.randrange(len(buf) - 3)
            buf[at : at + 4] = rng.choice(
                (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x10\x00\x00")
            )
        elif op == 7 and buf:
            buf[0] = rng.randrange(256)
    return bytes(buf)


@dataclass
class SmokeResult:
    name: str
    executions: int = 0
    seconds: float = 0.0
    failures: list[tuple[bytes, str]] = field(default_factory=list)


def smoke(name: str, count: int = 2000, budget: float = 2.0, rng_seed: int = 1) -> SmokeResult:
    """Run a target over its seeds and then `count` mutated inputs (at most `budget` seconds
    for the mutated ones), without atheris' engine."""
    target = load(name)
    result = SmokeResult(name)
    pool = list(target.seeds()) + [p.read_bytes() for p in saved_inputs(name, crashes=False)]
    rng = random.Random(rng_seed)
    start = time.monotonic()

    def run(data: bytes) -> None:
        result.executions += 1
        try:
            target.test_one_input(data)
        except Exception:
            result.failures.append((data, traceback.format_exc()))

    for data in pool:
        run(data)
    deadline = time.monotonic() + budget
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        base = rng.choice(pool)
        run(mutate(rng, base, pool) if rng.random() < 0.9 else rng.randbytes(rng.randrange(64)))
    result.seconds = time.monotonic() - start
    return result


# -- running under atheris --------------------------------------------------------------------

_FINAL = re.compile(r"^#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+)", re.M)
_UNITS = re.compile(r"stat::number_of_executed_units: (\d+)")


@dataclass
class RunResult:
    name: str
    executions: int = 0
    cov: int = 0
    ft: int = 0
    seconds: float = 0.0
    findings: list[str] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)


def run_target(
    name: str, seconds: int, extra: list[str] | None = None, max_restarts: int = 5
) -> RunResult:
    """Fuzz one target for `seconds` in subprocesses (restarted after a finding while time is
    left); crash artifacts go to fuzz/crashes/<target>/, the log to fuzz/logs/<target>.log."""
    corpus = CORPUS / name
    if not corpus.is_dir() or not any(corpus.iterdir()):
        seed([name])
    crash_dir = CRASHES / name
    crash_dir.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(exist_ok=True)
    result = RunResult(name)
    start = time.monotonic()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT.parent) + os.pathsep + env.get("PYTHONPATH", "")
    with open(LOGS / f"{name}.log", "w") as log:
        for _ in range(max_restarts + 1):
            left = int(seconds - (time.monotonic() - start))
            if left < 2:
                break
            argv = [
                sys.executable,
                "-m",
                "fuzz.worker",
                name,
                str(corpus),
                f"-max_total_time={left}",
                f"-artifact_prefix={crash_dir}/",
                *LIBFUZZER_ARGS,
                *(extra or []),
            ]
            proc = subprocess.run(
                argv,
                cwd=str(ROOT.parent),
                env=env,
                capture_output=True,
                text=True,
                errors="replace",
            )
            output = proc.stdout + proc.stderr
            log.write(output)
            log.flush()
            result.exit_codes.append(proc.returncode)
            units = [int(u) for u in _UNITS.findall(output)]
            stats = _FINAL.findall(output)
            if units:
                result.executions += units[-1]
            elif stats:
                result.executions += int(stats[-1][0])
            if stats:
                result.cov = max(result.cov, int(stats[-1][1]))
                result.ft = max(result.ft, int(stats[-1][2]))
            if proc.returncode != 0:
                found = re.findall(r"Test unit written to (\S+)", output)
                result.findings += found or [f"exit {proc.returncode}"]
    result.seconds = time.monotonic() - start
    return result
