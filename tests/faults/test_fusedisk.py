"""The FUSE fault-injection disk (fusedisk.py): reads see unsynced writes, fsync makes them
durable, a power cut drops what was not fsynced (or keeps a torn prefix), names apply at once."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fusedisk import FuseDisk, fuse_unavailable

pytestmark = pytest.mark.skipif(fuse_unavailable() is not None, reason=str(fuse_unavailable()))


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[FuseDisk]:
    d = FuseDisk(tmp_path / "backing", tmp_path / "mnt", tmp_path / "fuse.log")
    d.mount(seed=1)
    try:
        yield d
    finally:
        d.close()


def _write(path: Path, data: bytes, *, sync: bool, mode: str = "wb") -> None:
    with open(path, mode, buffering=0) as f:
        f.write(data)
        if sync:
            os.fsync(f.fileno())


def test_unsynced_writes_are_read_back_and_lost_at_a_power_cut(disk: FuseDisk) -> None:
    mnt, backing = disk.mountpoint, disk.backing
    _write(mnt / "a", b"durable", sync=True)
    _write(mnt / "a", b"+volatile", sync=False, mode="ab")
    _write(mnt / "b", b"never synced", sync=False)
    assert (mnt / "a").read_bytes() == b"durable+volatile"
    assert os.path.getsize(mnt / "a") == len(b"durable+volatile")
    assert (backing / "a").read_bytes() == b"durable"
    assert "2 files" in disk.power_cut(tear=False)
    assert (backing / "a").read_bytes() == b"durable"
    # Names apply at once (the documented limitation): the file is there, empty.
    assert (backing / "b").read_bytes() == b""


def test_fsync_writes_through_and_truncation_is_unsynced_too(disk: FuseDisk) -> None:
    mnt, backing = disk.mountpoint, disk.backing
    _write(mnt / "t", b"0123456789" * 100, sync=True)
    with open(mnt / "t", "r+b", buffering=0) as f:
        f.truncate(10)
        f.seek(0, os.SEEK_END)
        f.write(b"abc")
    assert (mnt / "t").read_bytes() == b"0123456789abc"
    disk.power_cut(tear=False)
    assert (backing / "t").read_bytes() == b"0123456789" * 100
    disk.mount()
    with open(disk.mountpoint / "t", "r+b", buffering=0) as f:
        f.truncate(4)
        f.seek(0, os.SEEK_END)
        f.write(b"xy")
        os.fsync(f.fileno())
    assert (backing / "t").read_bytes() == b"0123xy"


def test_a_torn_cut_keeps_a_prefix_of_the_unsynced_writes(disk: FuseDisk) -> None:
    _write(disk.mountpoint / "log", b"head", sync=True)
    with open(disk.mountpoint / "log", "ab", buffering=0) as f:
        for i in range(50):
            f.write(b"record-%02d;" % i)
    disk.power_cut(random.Random(3), tear=True)
    kept = (disk.backing / "log").read_bytes()
    full = b"head" + b"".join(b"record-%02d;" % i for i in range(50))
    assert full.startswith(kept) and len(kept) >= 4


def test_directories_renames_and_removals(disk: FuseDisk) -> None:
    mnt = disk.mountpoint
    (mnt / "d").mkdir()
    _write(mnt / "d" / "x.tmp", b"state", sync=True)
    os.replace(mnt / "d" / "x.tmp", mnt / "d" / "x")
    assert sorted(os.listdir(mnt / "d")) == ["x"]
    assert (mnt / "d" / "x").read_bytes() == b"state"
    fd = os.open(mnt / "d", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    (mnt / "d" / "x").unlink()
    (mnt / "d").rmdir()
    assert os.listdir(mnt) == []
    assert os.listdir(disk.backing) == []
