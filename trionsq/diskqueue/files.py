"""go-diskqueue's files: their names, the metadata file's text, and atomic rewrites.

A queue named ``N`` in ``data_path`` keeps its records in ``N.diskqueue.000000.dat``,
``N.diskqueue.000001.dat``, ... and its positions in ``N.diskqueue.meta.dat``, whose text is
``"depth\\nreadFileNum,readPos\\nwriteFileNum,writePos\\n"`` (reference §7). trionsq adds
``N.diskqueue.deferred.dat`` beside them, which Go nsqd ignores.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass

# Our own generator for temp-file names: the global one belongs to whoever seeds it (Hypothesis
# does, and warns when code under test draws from it).
_tmp_names = random.Random()
_METADATA = re.compile(rb"(-?\d+)\n(-?\d+),(-?\d+)\n(-?\d+),(-?\d+)\n")


def data_file_name(data_path: str, name: str, file_num: int) -> str:
    return os.path.join(data_path, f"{name}.diskqueue.{file_num:06d}.dat")


def metadata_file_name(data_path: str, name: str) -> str:
    return os.path.join(data_path, f"{name}.diskqueue.meta.dat")


def deferred_file_name(data_path: str, name: str) -> str:
    """trionsq's side file: the due times of deferred messages written at shutdown."""
    return os.path.join(data_path, f"{name}.diskqueue.deferred.dat")


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
    """The metadata file exists but does not hold go-diskqueue's text."""


def parse_metadata(text: bytes) -> Metadata:
    match = _METADATA.match(text)
    if match is None:
        raise MetadataError(f"unexpected metadata {text[:80]!r}")
    return Metadata(*(int(group) for group in match.groups()))


def read_metadata(path: str) -> Metadata | None:
    """The metadata in `path`, or None when there is no such file (a new queue)."""
    try:
        with open(path, "rb") as f:
            text = f.read(4096)
    except FileNotFoundError:
        return None
    return parse_metadata(text)


def write_file_atomically(path: str, data: bytes) -> None:
    """Write `data` to ``path.<rand>.tmp``, fsync it and rename it over `path`, as Go's
    nsqd and go-diskqueue do (a crash leaves the old or the new file, never a mix)."""
    tmp = f"{path}.{_tmp_names.getrandbits(62)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _remove_quietly(tmp)
        raise
    os.close(fd)
    try:
        os.rename(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


def read_deferred(path: str) -> dict[bytes, int]:
    """Message ID -> due time (Unix ns) from a deferred side file; {} if there is none.
    Raises ValueError (JSON's errors included) when the file is not one."""
    try:
        with open(path, "rb") as f:
            raw = json.load(f)
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


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
