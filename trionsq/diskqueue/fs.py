"""The file operations the disk queue and nsqd's metadata use, behind one small interface.

`LocalFileSystem` is the real one (plain `os` calls). The interface exists so that tests can
put `SimulatedDisk` (simulated.py) under a whole nsqd: a file system that knows which bytes
and which directory entries were made durable, and loses the rest at a simulated power cut.
Every method may block on the disk: callers in the event loop use only the cheap ones (writes
into the page cache, reads of a chunk); fsyncs run in the disk syncer's worker thread.
"""

from __future__ import annotations

import fcntl
import os
from typing import Protocol

#: `open` flags, re-exported so that callers need not import `os` for them.
O_RDONLY = os.O_RDONLY
O_WRONLY = os.O_WRONLY
O_CREAT = os.O_CREAT
O_TRUNC = os.O_TRUNC


class FileSystem(Protocol):
    """What the disk queue, its syncer and nsqd's metadata writer need of a file system."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int: ...
    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int: ...
    def pread(self, fd: int, size: int, offset: int) -> bytes: ...
    def fsize(self, fd: int) -> int: ...
    def ftruncate(self, fd: int, length: int) -> None: ...
    def fsync(self, fd: int) -> None: ...
    def close(self, fd: int) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def remove(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def size(self, path: str) -> int: ...
    def exists(self, path: str) -> bool: ...
    def read_file(self, path: str, limit: int = -1) -> bytes: ...
    def fsync_dir(self, path: str) -> None: ...
    def lock_dir(self, path: str) -> int: ...
    def unlock_dir(self, handle: int) -> None: ...


class LocalFileSystem:
    """The operating system's file system."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def fsize(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        """Make the file's data durable (fdatasync: the size is included, timestamps are not)."""
        os.fdatasync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def size(self, path: str) -> int:
        """The file's size; FileNotFoundError if there is none."""
        return os.stat(path).st_size

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_file(self, path: str, limit: int = -1) -> bytes:
        """The file's contents (up to `limit` bytes); FileNotFoundError if there is none."""
        with open(path, "rb") as f:
            return f.read(limit)

    def fsync_dir(self, path: str) -> None:
        """Make the directory's entries durable (files created, renamed or removed in it)."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock_dir(self, path: str) -> int:
        """Take the exclusive lock Go nsqd takes on its data path; OSError if it is held."""
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return fd

    def unlock_dir(self, handle: int) -> None:
        os.close(handle)


#: The file system every queue uses unless it is given another.
LOCAL: FileSystem = LocalFileSystem()


def write_all(fs: FileSystem, fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of `data` at `offset` (a short write is continued)."""
    view = memoryview(data)
    while view:
        written = fs.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
