"""A small real filesystem for disk-fault tests: a 2 MiB tmpfs (`small_disk`, root only:
skipped where it cannot be mounted) and `fill`, which takes every free byte of it."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(path: Path) -> Path:
    """Take every free byte of the filesystem with one file (unbuffered: nothing is left
    to flush when the disk is full)."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    chunk = b"\0" * 65536
    try:
        while True:
            os.write(fd, chunk)  # short once nearly full, then ENOSPC
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler
