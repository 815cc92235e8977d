"""The long run of the fault suite (``bench/faults``): N trials of each chosen fault, one
``FAULT-TRIAL`` line each, then a summary table per fault kind.

    python -m tests.faults.run --trials 5 --faults kill,stop,partition
    python -m tests.faults.run --trials 1 --faults all --nsqd "/path/to/nsqd"

Faults are scenario names or groups (`trial.GROUPS`: kill, stop, partition, corrupt, flip,
truncate, wipe, power; "all"). A scenario that cannot run here (no network namespaces, no
FUSE) is reported once and left out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from typing import Any

from .checker import summarise, trial_line
from .trial import SCENARIOS, TrialOptions, Unavailable, expand, run_trial, unavailable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3, help="trials per fault (default 3)")
    parser.add_argument(
        "--faults",
        default="all",
        help="comma-separated scenarios or groups (default all): " + ", ".join(SCENARIOS),
    )
    parser.add_argument("--seed", type=int, default=1, help="first trial's seed (default 1)")
    parser.add_argument("--rate", type=float, default=1500.0, help="publish rate, msgs/s")
    parser.add_argument(
        "--nsqd",
        default=None,
        help="the nsqd command line (default: this checkout's trionsq nsqd; or "
        "TRIONSQ_FAULTS_NSQD)",
    )
    parser.add_argument(
        "--network",
        choices=["auto", "netns"],
        default="auto",
        help="netns: every scenario in network namespaces (default: only those that cut links)",
    )
    parser.add_argument("--keep", action="store_true", help="keep each trial's data and logs")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of all")
    parser.add_argument("-v", "--verbose", action="store_true", help="narrate each trial")
    args = parser.parse_args(argv)

    names = expand(args.faults)
    runnable = []
    for name in names:
        reason = unavailable(name)
        if reason:
            print(f"faults: {name} left out: {reason}", file=sys.stderr)
        else:
            runnable.append(name)

    def log(text: str) -> None:
        print(f"faults: {text}", file=sys.stderr, flush=True)

    results: list[dict[str, Any]] = []
    started = time.monotonic()
    for trial in range(args.trials):
        for name in runnable:
            seed = args.seed + trial
            options = TrialOptions(
                seed=seed,
                rate=args.rate,
                network=args.network,
                command=shlex.split(args.nsqd) if args.nsqd else None,
                keep=args.keep,
                log=log if args.verbose else None,
            )
            if args.verbose:
                log(f"trial {name} seed {seed}")
            try:
                result = run_trial(name, options)
            except Unavailable as exc:
                print(f"faults: {name} left out: {exc}", file=sys.stderr)
                continue
            print(trial_line(name, seed, result.figures), flush=True)
            if result.figures.get("error") or result.figures.get("lost"):
                print(result.logs, file=sys.stderr)
            if result.root is not None:
                log(f"kept {result.root}")
            results.append({"fault": name, "seed": seed, **result.figures})
    print()
    print(
        f"{len(results)} trials in {time.monotonic() - started:.0f} s (nsqd: "
        f"{args.nsqd or os.environ.get('TRIONSQ_FAULTS_NSQD') or 'trionsq'})"
    )
    print(summarise(results))
    if args.json:
        print(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
