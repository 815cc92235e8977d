"""Record Go NSQ's log lines for the scripts into ``golden/<daemon>.txt``:

    .venv/bin/python -m tests.golog.record /path/to/go/nsq/bin [nsqd nsqlookupd nsqadmin]

`bin` holds Go NSQ 1.3's nsqd, nsqlookupd and nsqadmin. Each script runs once against them;
the lines are masked (see driver.py) before they are written. Go's daemons have races of their
own: look at the diff before committing a new recording (e.g. nsqd's messagePump of a deflate
client that disconnects sometimes logs a write error after it closed: it is not in the golden).
"""

from __future__ import annotations

import subprocess
import sys

from .driver import GOLDEN_DIR, Run, go_family, write_golden
from .scripts import SCRIPTS


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    bin_dir, names = argv[0], argv[1:] or list(SCRIPTS)
    family = go_family(bin_dir)
    for name in names:
        version = subprocess.run(
            [family.argv(name)[0], "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
        run = Run(family)
        try:
            SCRIPTS[name](run)
        finally:
            run.close()
        header = (
            f"{name}: log lines of Go's {version} at its default level for the actions of\n"
            f"tests/golog/scripts.py's {name}_script, masked (tests/golog/driver.py).\n"
            "Recorded by tests/golog/record.py; compared by tests/golog/test_golog.py."
        )
        write_golden(GOLDEN_DIR / f"{name}.txt", header, run.steps)
        print(f"{name}: {sum(len(s.lines) for s in run.steps)} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
