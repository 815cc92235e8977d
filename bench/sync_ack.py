"""What --sync-ack costs: publish and deliver with every message through the disk queue
(``--mem-queue-size=0``), answered once written (as Go nsqd) or once fsynced (``--sync-ack``,
group commit), for several numbers of concurrent publishers.

For each publisher count and batch size it alternates the two modes `--rounds` times; each run
is `trionsq bench reader` on a fresh nsqd (the writer publishes for `--runfor`, each publisher
process waiting for its OK before the next command, as Go's bench_writer does; then the reader
drains the backlog). It prints the median of each figure and the ratio sync-ack / plain.

    .venv/bin/python bench/sync_ack.py                      # 1, 4, 20 and 32 publishers
    .venv/bin/python bench/sync_ack.py --procs 20 --batch-size 1 --rounds 5

Figures depend on the disk's fsync latency: the nsqds keep their data in a temporary directory
(``TMPDIR``), so point that at the disk nsqd would use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MODES = {
    "plain": ["--mem-queue-size=0"],
    "sync-ack": ["--sync-ack"],
}


def _run_once(args: argparse.Namespace, procs: int, batch: int, flags: list[str]) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "trionsq.apps.bench",
        "reader",
        f"--procs={procs}",
        f"--batch-size={batch}",
        "--size=100",
        f"--runfor={args.runfor}",
        "--json",
        *(f"--nsqd-arg={flag}" for flag in flags),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {
        "publish": result["writer"]["msgs"] / result["writer"]["elapsed"],
        "deliver": result["reader"]["msgs"] / result["reader"]["elapsed"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 4, 20, 32])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[200, 1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runfor", default="5s")
    args = parser.parse_args()
    print(
        f"sync-ack bench: {os.cpu_count()} cores, {args.rounds} alternating rounds, "
        f"{args.runfor} runs, 100 B messages; median msg/s",
        flush=True,
    )
    header = f"{'publishers':>10} {'batch':>5} | {'publish plain':>13} {'sync-ack':>9} {'ratio':>6}"
    header += f" | {'deliver plain':>13} {'sync-ack':>9} {'ratio':>6}"
    print(header, flush=True)
    for batch in args.batch_size:
        for procs in args.procs:
            figures: dict[str, list[dict]] = {mode: [] for mode in MODES}
            for _ in range(args.rounds):
                for mode, flags in MODES.items():
                    figures[mode].append(_run_once(args, procs, batch, flags))
            row = f"{procs:>10} {batch:>5}"
            for figure in ("publish", "deliver"):
                plain = statistics.median(r[figure] for r in figures["plain"])
                acked = statistics.median(r[figure] for r in figures["sync-ack"])
                row += f" | {plain:>13,.0f} {acked:>9,.0f} {acked / plain:>5.2f}x"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
