"""``python -m spec check [NAME ...]``: explore each spec to its bounds and check that every
mutant is rejected; prints bounds, distinct states, depth, time and result per spec.
``python -m spec trace FILE ...``: check the replication traces of one run (trace_check.py)."""

from __future__ import annotations

import argparse
import sys

from .checker import DEFAULT_MAX_STATES, Result, check, format_trace
from .registry import all_mutants, all_specs, matches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec")
    commands = parser.add_subparsers(dest="command", required=True)
    check_cmd = commands.add_parser("check", help="model-check specs and their mutants")
    check_cmd.add_argument("names", nargs="*", help="spec names or modules (default: all)")
    check_cmd.add_argument("--no-mutants", action="store_true", help="skip the mutants")
    check_cmd.add_argument(
        "--traces", action="store_true", help="print each rejected mutant's counterexample"
    )
    check_cmd.add_argument("--max-states", type=int, default=DEFAULT_MAX_STATES)
    commands.add_parser("list", help="list specs and mutants")
    trace_cmd = commands.add_parser(
        "trace", help="check the members' --replication-trace-file of one run against the spec"
    )
    trace_cmd.add_argument("files", nargs="+", help="one trace per member")
    args = parser.parse_args(argv)

    if args.command == "trace":
        from .trace_check import run

        return run(args.files)

    if args.command == "list":
        for spec in all_specs():
            print(f"{spec.name}: {spec.description}")
        for mutant in all_mutants():
            print(f"mutant {mutant.name}: {mutant.description}")
        return 0

    failed = False
    selected = [s for s in all_specs() if matches(s.name, args.names)]
    if not selected:
        print(f"no spec matches {' '.join(args.names)}", file=sys.stderr)
        return 2
    for spec in selected:
        result = check(spec, args.max_states)
        print(_summary(result))
        if not result.ok:
            failed = True
            if result.violation:
                print(format_trace(spec, result.violation))
    if not args.no_mutants:
        for mutant in all_mutants():
            if not matches(mutant.name, args.names):
                continue
            result = check(mutant.spec, args.max_states)
            if result.violation is None:
                failed = True
                print(f"mutant {mutant.name}: NOT REJECTED ({result.states:,} states)")
                continue
            v = result.violation
            print(
                f"mutant {mutant.name}: rejected by {v.kind} {v.property!r} "
                f"({len(v.trace) - 1}-step counterexample, {result.seconds:.2f} s)"
            )
            if args.traces:
                print(format_trace(mutant.spec, v))
    return 1 if failed else 0


def _summary(result: Result) -> str:
    spec = result.spec
    bounds = " ".join(f"{k}={v}" for k, v in spec.bounds.items())
    if result.violation is not None:
        outcome = "VIOLATION"
    elif not result.complete:
        outcome = "INCOMPLETE (state limit reached)"
    else:
        outcome = "ok"
    return (
        f"{spec.name}: {outcome}\n"
        f"  bounds: {bounds or '-'}\n"
        f"  {result.states:,} distinct states, depth {result.depth}, {result.seconds:.2f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
