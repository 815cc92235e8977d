"""The nemesis: faults a trial injects and undoes, each a plain function over the cluster.

- `kill` / `restart`: ``kill -9`` of members (any, or all at once) and their restart on the
  same data directories;
- `pause` / `resume`: SIGSTOP and SIGCONT;
- `partition` / `heal`: cut links between members, or between a member and the clients (the
  members must run in network namespaces, `cluster.Netns`);
- `corrupt`: bit flips or a truncation of one member's data files of one kind (the
  replication log, a FIN file, disk-queue segments), made while it is down;
- `wipe`: a member's data directory emptied, while it is down;
- the power cut is `fusedisk.FuseDisk.power_cut` (every member on a disk that drops what was
  not fsynced).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from .cluster import Cluster, Member, Netns
from .load import History

#: Which files `corrupt` hits, by kind (glob patterns in a member's data path).
DATA_FILES = {
    "log": ["*.replication.log"],
    "fin": ["*.replication.fin"],
    "segment": ["*.diskqueue.*.dat"],
}


def kill(members: Iterable[Member]) -> None:
    """kill -9 each member (one after the other, within milliseconds)."""
    for member in members:
        member.kill()


def restart(cluster: Cluster, members: Sequence[Member]) -> None:
    """Start members again on their data directories and wait for their /ping."""
    cluster.start(members)


def pause(member: Member) -> None:
    member.pause()


def resume(member: Member) -> None:
    member.resume()


def partition(netns: Netns, history: History, cuts: Iterable[tuple[int | str, int | str]]) -> None:
    """Cut each link of `cuts` (member indexes, "root" for the clients' namespace)."""
    now = time.monotonic()
    for a, b in cuts:
        netns.cut_link(a, b)
        if "root" in (a, b):
            member = b if a == "root" else a
            assert isinstance(member, int)
            with history.lock:
                history.client_cuts.append((member, now, None))


def heal(netns: Netns, history: History) -> None:
    """Restore every cut link."""
    netns.restore_all()
    now = time.monotonic()
    with history.lock:
        history.client_cuts[:] = [
            (m, start, now if end is None else end) for m, start, end in history.client_cuts
        ]


def data_files(data: Path, kind: str) -> list[Path]:
    """The member's files of one kind (see `DATA_FILES`), non-empty ones only (a disk
    queue's segments, ``<name>.diskqueue.000001.dat``, not its ``.meta.dat``)."""
    found: list[Path] = []
    for pattern in DATA_FILES[kind]:
        for path in sorted(data.glob(pattern)):
            if kind == "segment" and not path.name.rsplit(".", 2)[1].isdigit():
                continue
            if path.is_file() and path.stat().st_size > 0:
                found.append(path)
    return found


def corrupt(data: Path, kind: str, mode: str, rng: random.Random) -> str:
    """Flip bits in (``mode="flip"``) or truncate (``"truncate"``) one file of `kind` in a
    down member's data path; returns what was done (or that there was no such file)."""
    files = data_files(data, kind)
    if not files:
        return f"no {kind} file in {data.name}"
    path = rng.choice(files)
    size = path.stat().st_size
    if mode == "truncate":
        new_size = rng.randrange(size)
        with open(path, "r+b") as f:
            f.truncate(new_size)
        return f"{path.name}: truncated {size} -> {new_size} bytes"
    flips = rng.randint(1, 4)
    offsets = sorted(rng.randrange(size) for _ in range(flips))
    with open(path, "r+b") as f:
        for offset in offsets:
            f.seek(offset)
            byte = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    return f"{path.name} ({size} bytes): bits flipped at {offsets}"


def wipe(data: Path) -> str:
    """Remove everything in a down member's data path (the directory stays)."""
    removed = 0
    for child in data.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
        removed += 1
    return f"{data.name}: {removed} entries removed"
