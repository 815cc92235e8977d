"""`SimulatedDisk`: an in-memory file system that loses what was not made durable when its
power is cut: the fault-injection layer of the power-cut tests.

Theory of operation. Each file is an inode with two contents: what the running process sees
(`current`, the page cache) and what is on the platter (`durable`, set by `fsync`). Each
directory has two views of its names likewise: the running one, and the one made durable by
`fsync_dir` (a file created, renamed or removed is durable only once its directory is synced,
as POSIX says and as careful databases assume). `power_cut` returns the disk as it comes back:
only durable names, each with its durable content, and, when `torn` is set, a random prefix of
the bytes appended since the last fsync (a write the disk had partly done), chosen per file
independently (pages reach the disk in no particular order). The disk that lost power answers
every later call with EIO, so the process that used it cannot change what survives.

It is thread-safe (the disk syncer fsyncs from a worker thread).
"""

from __future__ import annotations

import errno
import os
import random
import threading
from dataclasses import dataclass, field

from .fs import O_CREAT, O_TRUNC


@dataclass
class _Inode:
    current: bytearray = field(default_factory=bytearray)
    durable: bytes = b""


class SimulatedDisk:
    """See the module docstring. Paths are strings; directories need not be created."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inodes: dict[int, _Inode] = {}
        self._names: dict[str, int] = {}
        self._durable_names: dict[str, int] = {}
        self._fds: dict[int, int] = {}
        self._next_inode = 1
        self._next_fd = 1000
        self._locked: set[str] = set()
        self.dead = False
        #: Calls made, by name (tests check that fsyncs happened).
        self.calls: dict[str, int] = {}

    # -- the file system interface -------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        with self._lock:
            self._call("open")
            ino = self._names.get(path)
            if ino is None:
                if not flags & O_CREAT:
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
                ino = self._next_inode
                self._next_inode += 1
                self._inodes[ino] = _Inode()
                self._names[path] = ino
            elif flags & O_TRUNC:
                self._inodes[ino].current = bytearray()
            fd = self._next_fd
            self._next_fd += 1
            self._fds[fd] = ino
            return fd

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        with self._lock:
            self._call("pwrite")
            content = self._inode(fd).current
            if offset > len(content):
                content.extend(bytes(offset - len(content)))
            content[offset : offset + len(data)] = data
            return len(data)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        with self._lock:
            self._call("pread")
            return bytes(self._inode(fd).current[offset : offset + size])

    def fsize(self, fd: int) -> int:
        with self._lock:
            self._call("fsize")
            return len(self._inode(fd).current)

    def ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            self._call("ftruncate")
            content = self._inode(fd).current
            if length < len(content):
                del content[length:]
            else:
                content.extend(bytes(length - len(content)))

    def fsync(self, fd: int) -> None:
        with self._lock:
            self._call("fsync")
            inode = self._inode(fd)
            inode.durable = bytes(inode.current)

    def close(self, fd: int) -> None:
        with self._lock:
            self._call("close")
            if self._fds.pop(fd, None) is None:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            self._call("rename")
            ino = self._names.pop(src, None)
            if ino is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), src)
            self._names[dst] = ino

    def remove(self, path: str) -> None:
        with self._lock:
            self._call("remove")
            if self._names.pop(path, None) is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)

    def listdir(self, path: str) -> list[str]:
        with self._lock:
            self._call("listdir")
            return [os.path.basename(p) for p in self._names if os.path.dirname(p) == path]

    def size(self, path: str) -> int:
        with self._lock:
            self._call("size")
            ino = self._names.get(path)
            if ino is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            return len(self._inodes[ino].current)

    def exists(self, path: str) -> bool:
        with self._lock:
            self._call("exists")
            return path in self._names

    def read_file(self, path: str, limit: int = -1) -> bytes:
        with self._lock:
            self._call("read_file")
            ino = self._names.get(path)
            if ino is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            content = self._inodes[ino].current
            return bytes(content if limit < 0 else content[:limit])

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            self._call("fsync_dir")
            for name in [n for n in self._durable_names if os.path.dirname(n) == path]:
                del self._durable_names[name]
            for name, ino in self._names.items():
                if os.path.dirname(name) == path:
                    self._durable_names[name] = ino

    def lock_dir(self, path: str) -> int:
        with self._lock:
            self._call("lock_dir")
            if path in self._locked:
                raise OSError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK), path)
            self._locked.add(path)
            fd = self._next_fd
            self._next_fd += 1
            self._fds[fd] = -1
            return fd

    def unlock_dir(self, handle: int) -> None:
        with self._lock:
            self._fds.pop(handle, None)
            self._locked.clear()

    # -- power ---------------------------------------------------------------------------

    def power_cut(self, rng: random.Random | None = None, *, torn: bool = False) -> SimulatedDisk:
        """Cut the power: this disk answers EIO from now on, and the returned disk holds what
        survived (see the module docstring)."""
        rng = rng or random.Random()
        with self._lock:
            self.dead = True
            survivor = SimulatedDisk()
            copies: dict[int, int] = {}
            for name, ino in sorted(self._durable_names.items()):
                if ino not in copies:
                    inode = self._inodes[ino]
                    content = inode.durable
                    unsynced = bytes(inode.current[len(content) :])
                    if torn and unsynced and inode.current.startswith(content):
                        content += unsynced[: rng.randint(0, len(unsynced))]
                    copies[ino] = survivor._new_inode(content)
                survivor._names[name] = survivor._durable_names[name] = copies[ino]
            return survivor

    # -- inspection (tests) --------------------------------------------------------------

    def files(self) -> dict[str, bytes]:
        """Every file the running process sees, by path."""
        with self._lock:
            return {name: bytes(self._inodes[ino].current) for name, ino in self._names.items()}

    def unsynced_bytes(self) -> int:
        """Bytes the process sees that a power cut would lose (in files and in names)."""
        with self._lock:
            lost = 0
            for name, ino in self._names.items():
                inode = self._inodes[ino]
                if self._durable_names.get(name) != ino:
                    lost += len(inode.current)
                elif inode.current != inode.durable:
                    lost += abs(len(inode.current) - len(inode.durable)) or 1
            return lost

    # -- internals -----------------------------------------------------------------------

    def _new_inode(self, content: bytes) -> int:
        ino = self._next_inode
        self._next_inode += 1
        self._inodes[ino] = _Inode(bytearray(content), content)
        return ino

    def _inode(self, fd: int) -> _Inode:
        ino = self._fds.get(fd)
        if ino is None or ino < 0:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return self._inodes[ino]

    def _call(self, name: str) -> None:
        if self.dead:
            raise OSError(errno.EIO, "the simulated disk lost power")
        self.calls[name] = self.calls.get(name, 0) + 1
