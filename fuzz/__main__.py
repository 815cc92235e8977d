"""``python -m fuzz``: list | seed | run [TARGET...] --seconds N | replay | smoke | network."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from .targets import TARGETS

    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the targets and what each asserts")
    p_seed = sub.add_parser("seed", help="write seed corpora (fuzz/corpus/<target>/seed-*)")
    p_seed.add_argument("targets", nargs="*", choices=[[], *TARGETS], metavar="TARGET")
    p_run = sub.add_parser("run", help="fuzz targets with atheris, each in a subprocess")
    p_run.add_argument("targets", nargs="*", metavar="TARGET")
    p_run.add_argument("--seconds", type=int, default=60, help="per target")
    p_run.add_argument("--parallel", type=int, default=1, help="targets run at once")
    p_run.add_argument("--json", help="write the figures to this file")
    p_run.add_argument(
        "--libfuzzer", action="append", default=[], help="a libFuzzer flag, e.g. -jobs=2"
    )
    p_replay = sub.add_parser("replay", help="run saved crash/regression inputs in-process")
    p_replay.add_argument("targets", nargs="*", metavar="TARGET")
    p_smoke = sub.add_parser("smoke", help="seeds + random mutations, no atheris")
    p_smoke.add_argument("targets", nargs="*", metavar="TARGET")
    p_smoke.add_argument("--count", type=int, default=2000)
    p_net = sub.add_parser("network", help="Hypothesis sessions against live daemons")
    p_net.add_argument("--examples", type=int, default=50)
    args = parser.parse_args(argv)

    for name in getattr(args, "targets", None) or []:
        if name not in TARGETS:
            parser.error(f"unknown target {name!r} (python -m fuzz list)")

    from . import harness

    if args.command == "list":
        for name in TARGETS:
            print(f"{name:10} {harness.load(name).__doc__.splitlines()[0]}")  # type: ignore[union-attr]
        return 0
    if args.command == "seed":
        for name, n in harness.seed(args.targets or None).items():
            print(f"{name}: {n} seeds")
        return 0
    if args.command == "replay":
        failures = harness.replay(args.targets or None)
        for path, tb in failures:
            print(f"FAIL {path}\n{tb}")
        print(f"replay: {len(failures)} failing input(s)")
        return 1 if failures else 0
    if args.command == "smoke":
        bad = 0
        for name in args.targets or TARGETS:
            r = harness.smoke(name, args.count)
            print(f"{name:10} {r.executions:7} inputs {r.seconds:6.2f}s {len(r.failures)} failures")
            for data, tb in r.failures[:3]:
                print(f"  {data[:80]!r}\n{tb}")
            bad += len(r.failures)
        return 1 if bad else 0
    if args.command == "network":
        from .network import run_sessions

        run_sessions(args.examples)
        return 0
    # run
    names = args.targets or list(TARGETS)
    extra = list(args.libfuzzer)
    with concurrent.futures.ThreadPoolExecutor(max(1, args.parallel)) as pool:
        results = list(pool.map(lambda n: harness.run_target(n, args.seconds, extra), names))
    print(f"{'target':10} {'execs':>10} {'cov':>6} {'ft':>7} {'time s':>7}  findings")
    for r in results:
        print(
            f"{r.name:10} {r.executions:10} {r.cov:6} {r.ft:7} {r.seconds:7.0f}  "
            f"{len(r.findings)} {' '.join(r.findings)}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in results], f, indent=1)
    return 1 if any(r.findings for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
