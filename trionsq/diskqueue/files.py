"""go-diskqueue's files: their names, the metadata file's text, and atomic rewrites.

A queue named ``N`` in ``data_path`` keeps its records in ``N.diskqueue.000000.dat``,
``N.diskqueue.000001.dat``, ... and its positions in ``N.diskqueue.meta.dat``, whose text is
``"depth\\nreadFileNum,readPos\\nwriteFileNum,writePos\\n"`` (docs/protocol.md §7). trionsq adds
``N.diskqueue.deferred.dat`` (due times of messages written at shutdown) and
``N.diskqueue.deferred.log`` (deferred.py), ``N.diskqueue.000000.crc``, ... (the checksums of
the segments it writes, checksums.py) and ``N.diskqueue.bad`` (records that failed their
checksum) beside them, which Go nsqd ignores: it opens its files by name and never lists the
directory.

Every function takes the file system to use (fs.py), so that tests can run them on a
simulated disk.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass

from .fs import O_CREAT, O_TRUNC, O_WRONLY, FileSystem, write_all

# Our own generator for temp-file names: the global one belongs to whoever seeds it (Hypothesis
# does, and warns when code under test draws from it).
_tmp_names = random.Random()
_METADATA = re.compile(rb"(-?\d+)\n(-?\d+),(-?\d+)\n(-?\d+),(-?\d+)\n")
#: go-diskqueue's fields are int64: a value beyond is not go's metadata.
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def data_file_name(data_path: str, name: str, file_num: int) -> str:
    return os.path.join(data_path, f"{name}.diskqueue.{file_num:06d}.dat")


def side_file_name(data_path: str, name: str, file_num: int) -> str:
    """trionsq's checksum side file of segment `file_num` (checksums.py)."""
    return os.path.join(data_path, f"{name}.diskqueue.{file_num:06d}.crc")


def bad_records_file_name(data_path: str, name: str) -> str:
    """Where records that fail their checksum are moved (go-diskqueue records, appended)."""
    return os.path.join(data_path, f"{name}.diskqueue.bad")


def metadata_file_name(data_path: str, name: str) -> str:
    return os.path.join(data_path, f"{name}.diskqueue.meta.dat")


def deferred_file_name(data_path: str, name: str) -> str:
    """trionsq's side file: the due times of deferred messages written at shutdown."""
    return os.path.join(data_path, f"{name}.diskqueue.deferred.dat")


def deferred_log_name(data_path: str, name: str) -> str:
    """trionsq's log of the deferred messages a durable queue holds while nsqd runs."""
    return os.path.join(data_path, f"{name}.diskqueue.deferred.log")


@dataclass(frozen=True, slots=True)
class Metadata:
    """What the metadata file holds: the unread message count and both positions."""

    depth: int = 0
    read_file: int = 0
    read_pos: int = 0
    write_file: int = 0
    write_pos: int = 0

    def encode(self) -> bytes:
        return (
            f"{self.depth}\n{self.read_file},{self.read_pos}\n{self.write_file},{self.write_pos}\n"
        ).encode()


class MetadataError(ValueError):
    """The metadata file exists but does not hold go-diskqueue's text, or holds values no
    queue can have (beyond int64, negative positions or file numbers)."""


def parse_metadata(text: bytes) -> Metadata:
    match = _METADATA.match(text)
    if match is None:
        raise MetadataError(f"unexpected metadata {text[:80]!r}")
    values = [int(group) for group in match.groups()]
    if any(not _INT64_MIN <= value <= _INT64_MAX for value in values):
        raise MetadataError(f"metadata value beyond int64 in {text[:80]!r}")
    if any(value < 0 for value in values[1:]):
        raise MetadataError(f"negative position in metadata {text[:80]!r}")
    # A negative depth is go's (its depth can go below 0): recovery recounts it.
    return Metadata(*values)


def read_metadata(fs: FileSystem, path: str) -> Metadata | None:
    """The metadata in `path`, or None when there is no such file (a new queue)."""
    try:
        text = fs.read_file(path, 4096)
    except FileNotFoundError:
        return None
    return parse_metadata(text)


def write_file_atomically(
    fs: FileSystem, path: str, data: bytes, *, sync_dir: bool = False
) -> None:
    """Write `data` to ``path.<rand>.tmp``, fsync it and rename it over `path`, as Go's
    nsqd and go-diskqueue do (a crash leaves the old or the new file, never a mix).
    `sync_dir` also makes the rename itself durable (a power cut cannot bring back the old
    file)."""
    tmp = f"{path}.{_tmp_names.getrandbits(62)}.tmp"
    fd = fs.open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    try:
        write_all(fs, fd, data, 0)
        fs.fsync(fd)
    except BaseException:
        fs.close(fd)
        _remove_quietly(fs, tmp)
        raise
    fs.close(fd)
    try:
        fs.rename(tmp, path)
    except BaseException:
        _remove_quietly(fs, tmp)
        raise
    if sync_dir:
        fs.fsync_dir(os.path.dirname(path) or ".")


def read_deferred(fs: FileSystem, path: str) -> dict[bytes, int]:
    """Message ID -> due time (Unix ns) from a deferred side file; {} if there is none.
    Raises ValueError (JSON's errors included) when the file is not one."""
    try:
        raw = json.loads(fs.read_file(path))
    except FileNotFoundError:
        return {}
    if not isinstance(raw, dict) or not isinstance(raw.get("deferred"), dict):
        raise ValueError("not a deferred-messages file")
    return {
        key.encode("ascii"): int(due)
        for key, due in raw["deferred"].items()
        if isinstance(key, str) and len(key) == 16 and key.isascii() and isinstance(due, int)
    }


def encode_deferred(due_times: dict[bytes, int]) -> bytes:
    deferred = {key.decode("ascii"): due for key, due in due_times.items()}
    return json.dumps({"version": 1, "deferred": deferred}, separators=(",", ":")).encode()


def _remove_quietly(fs: FileSystem, path: str) -> None:
    try:
        fs.remove(path)
    except OSError:
        pass
