"""A fault-injection disk for processes: a FUSE file system, in pure Python over
``/dev/fuse`` (no libfuse, no package), passing through to a backing directory but keeping
each file's written-and-not-yet-fsynced data in memory until an fsync, so that a power cut
can drop it.

- Reads see everything written (the unsynced data laid over the backing file); a file's size
  is what was written. ``fsync``/``fdatasync`` write the file's unsynced data (and an
  unsynced truncation) to the backing file: that is "on the platter".
- `FuseDisk.power_cut` (the server's SIGTERM, or SIGUSR1 to tear) unmounts and discards every
  file's unsynced data; tearing keeps a random prefix of each file's unsynced writes (in the
  order they were made, the last one cut at a random byte), as a disk that had done part of
  the work. The backing directory is then the disk as it comes back; `mount` again to use it.
- **Limitation**: creating, renaming, linking and removing names, directories, modes and
  times apply to the backing directory at once (as if every directory were fsynced after each
  change); only file contents and sizes can be lost. An unsynced truncation is lost at a cut.

The server is ``python -m tests.faults.fusedisk BACKING MOUNTPOINT [--seed N]`` (one process
per disk, single-threaded); it mounts with mount(2) and needs root and ``/dev/fuse``
(`fuse_unavailable` says why not). Kernel FUSE protocol 7.31 is spoken; an operation it does
not handle is answered ENOSYS (xattrs, locks: the kernel then does them itself or refuses).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import random
import signal
import stat
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- protocol (include/uapi/linux/fuse.h) -------------------------------------------------

LOOKUP, FORGET, GETATTR, SETATTR = 1, 2, 3, 4
MKNOD, MKDIR, UNLINK, RMDIR, RENAME, LINK = 8, 9, 10, 11, 12, 13
OPEN, READ, WRITE, STATFS, RELEASE, FSYNC = 14, 15, 16, 17, 18, 20
FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR, FSYNCDIR = 25, 26, 27, 28, 29, 30
ACCESS, CREATE, INTERRUPT, DESTROY, BATCH_FORGET = 34, 35, 36, 38, 42

KERNEL_MINOR = 31
FUSE_ASYNC_READ = 1 << 0
FUSE_BIG_WRITES = 1 << 5
FUSE_MAX_PAGES = 1 << 22
MAX_PAGES = 256
MAX_WRITE = MAX_PAGES * 4096

FATTR_MODE, FATTR_UID, FATTR_GID, FATTR_SIZE = 1, 2, 4, 8
FATTR_ATIME, FATTR_MTIME, FATTR_ATIME_NOW, FATTR_MTIME_NOW = 16, 32, 128, 256

IN_HEADER = struct.Struct("<IIQQIIIHH")
OUT_HEADER = struct.Struct("<IiQ")
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
ENTRY_OUT = struct.Struct("<QQQQII")  # followed by ATTR
ATTR_OUT = struct.Struct("<QII")  # followed by ATTR
OPEN_OUT = struct.Struct("<QII")
INIT_IN = struct.Struct("<IIII")
INIT_OUT = struct.Struct("<IIIIHHIIHHII24x")
SETATTR_IN = struct.Struct("<IIQQQQQQIIIIIIII")
READ_IN = struct.Struct("<QQIIQII")
WRITE_IN = struct.Struct("<QQIIQII")
WRITE_OUT = struct.Struct("<II")
CREATE_IN = struct.Struct("<IIII")
MKDIR_IN = struct.Struct("<II")
MKNOD_IN = struct.Struct("<IIII")
RENAME_IN = struct.Struct("<Q")
RELEASE_IN = struct.Struct("<QIIQ")
KSTATFS = struct.Struct("<QQQQQIIII24x")
DIRENT = struct.Struct("<QQII")

VALID = 1  # seconds the kernel may cache entries and attributes (only we change the tree)
MNT_DETACH = 2
MS_NOSUID, MS_NODEV = 2, 4


class PowerCut(Exception):
    """Raised in the server by SIGTERM (no tearing) or SIGUSR1 (tearing)."""

    def __init__(self, tear: bool) -> None:
        super().__init__("power cut")
        self.tear = tear


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def fuse_unavailable() -> str | None:
    """Why a FUSE disk cannot be mounted here (None: it can)."""
    if os.geteuid() != 0:
        return "the FUSE disk mounts with mount(2): it needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    try:
        with open("/proc/filesystems") as f:
            if "fuse" not in f.read().split():
                return "the kernel has no fuse file system"
    except OSError as exc:
        return f"cannot read /proc/filesystems: {exc}"
    return None


def _mounted(path: Path) -> bool:
    target = str(path)
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == target for line in f)
    except OSError:
        return False


# -- server ---------------------------------------------------------------------------------


@dataclass
class _File:
    """A regular file's state: a descriptor of the backing file, its logical size, and what
    was written or truncated since its last fsync."""

    fd: int
    size: int
    pending: list[tuple[int, bytearray]] = field(default_factory=list)
    #: the lowest size it was truncated to since the last fsync (None: not truncated)
    trunc: int | None = None
    opens: int = 0
    orphan: bool = False

    @property
    def dirty(self) -> bool:
        return bool(self.pending) or self.trunc is not None

    def write(self, offset: int, data: bytes) -> None:
        if self.pending:
            last_offset, last = self.pending[-1]
            if last_offset + len(last) == offset:
                last += data
                self.size = max(self.size, offset + len(data))
                return
        self.pending.append((offset, bytearray(data)))
        self.size = max(self.size, offset + len(data))

    def truncate(self, size: int) -> None:
        kept: list[tuple[int, bytearray]] = []
        for offset, data in self.pending:
            if offset < size:
                kept.append((offset, data[: size - offset]))
        self.pending = kept
        if size < self.size:
            self.trunc = size if self.trunc is None else min(self.trunc, size)
        self.size = size

    def read(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        valid = end if self.trunc is None else min(end, self.trunc)
        base = os.pread(self.fd, valid - offset, offset) if valid > offset else b""
        buf = bytearray(base)
        buf.extend(bytes(end - offset - len(buf)))
        for p_offset, data in self.pending:
            lo, hi = max(offset, p_offset), min(end, p_offset + len(data))
            if lo < hi:
                buf[lo - offset : hi - offset] = data[lo - p_offset : hi - p_offset]
        return bytes(buf)

    def sync(self) -> None:
        if self.trunc is not None:
            os.ftruncate(self.fd, self.trunc)
        for offset, data in self.pending:
            os.pwrite(self.fd, data, offset)
        if os.fstat(self.fd).st_size != self.size:
            os.ftruncate(self.fd, self.size)
        self.pending, self.trunc = [], None

    def tear(self, rng: random.Random) -> int:
        """Write a random prefix of the unsynced writes (the truncation is dropped)."""
        total = sum(len(d) for _, d in self.pending)
        keep = rng.randint(0, total)
        kept = keep
        for offset, data in self.pending:
            if keep <= 0:
                break
            os.pwrite(self.fd, data[:keep], offset)
            keep -= len(data)
        return kept


class Server:
    """The FUSE server of one mount."""

    def __init__(self, backing: Path, mountpoint: Path, seed: int) -> None:
        self.backing = str(backing)
        self.mountpoint = mountpoint
        self.rng = random.Random(seed)
        self.paths: dict[int, str] = {1: ""}
        self.ids: dict[str, int] = {"": 1}
        self.next_id = 2
        self.files: dict[int, _File] = {}
        self.dirs: dict[int, list[tuple[str, int, int]]] = {}
        self.next_fh = 1
        self.fd = -1

    # mount ------------------------------------------------------------------------------

    def mount(self) -> None:
        self.fd = os.open("/dev/fuse", os.O_RDWR)
        options = (
            f"fd={self.fd},rootmode=40000,user_id=0,group_id=0,allow_other,max_read={MAX_WRITE}"
        ).encode()
        libc = _libc()
        if libc.mount(
            b"trionsq-fusedisk",
            str(self.mountpoint).encode(),
            b"fuse.trionsq-fusedisk",
            MS_NOSUID | MS_NODEV,
            options,
        ):
            code = ctypes.get_errno()
            raise OSError(code, f"mount: {os.strerror(code)}")

    def unmount(self) -> None:
        _libc().umount2(str(self.mountpoint).encode(), MNT_DETACH)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # paths ------------------------------------------------------------------------------

    def _real(self, rel: str) -> str:
        return os.path.join(self.backing, rel) if rel else self.backing

    def _child(self, parent: int, name: bytes) -> str:
        base = self.paths[parent]
        text = os.fsdecode(name)
        return f"{base}/{text}" if base else text

    def _node(self, rel: str) -> int:
        node = self.ids.get(rel)
        if node is None:
            node = self.next_id
            self.next_id += 1
            self.ids[rel] = node
            self.paths[node] = rel
        return node

    def _attr(self, node: int) -> bytes:
        st = os.lstat(self._real(self.paths[node]))
        size = st.st_size
        state = self.files.get(node)
        if state is not None:
            size = state.size
        return ATTR.pack(
            st.st_ino,
            size,
            (size + 511) // 512,
            int(st.st_atime),
            int(st.st_mtime),
            int(st.st_ctime),
            st.st_atime_ns % 1_000_000_000,
            st.st_mtime_ns % 1_000_000_000,
            st.st_ctime_ns % 1_000_000_000,
            st.st_mode,
            st.st_nlink,
            st.st_uid,
            st.st_gid,
            st.st_rdev,
            4096,
            0,
        )

    def _entry(self, node: int) -> bytes:
        return ENTRY_OUT.pack(node, 0, VALID, VALID, 0, 0) + self._attr(node)

    def _file(self, node: int) -> _File:
        state = self.files.get(node)
        if state is None:
            fd = os.open(self._real(self.paths[node]), os.O_RDWR)
            state = _File(fd, os.fstat(fd).st_size)
            self.files[node] = state
        return state

    def _drop_name(self, rel: str) -> None:
        """A name was removed or replaced: its node (and any under it) is orphaned."""
        for path in [p for p in self.ids if p == rel or p.startswith(rel + "/")]:
            node = self.ids.pop(path)
            self.paths.pop(node, None)
            state = self.files.get(node)
            if state is not None:
                state.orphan = True
                self._maybe_close(node)

    def _maybe_close(self, node: int) -> None:
        state = self.files.get(node)
        if state is not None and state.opens <= 0 and (state.orphan or not state.dirty):
            os.close(state.fd)
            del self.files[node]

    # the loop ---------------------------------------------------------------------------

    def serve(self) -> None:
        while True:
            try:
                request = os.read(self.fd, MAX_WRITE + 65536)
            except OSError as exc:
                if exc.errno in (errno.ENODEV, errno.EBADF):
                    return
                if exc.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                    continue
                raise
            _, opcode, unique, node, *_ = IN_HEADER.unpack_from(request)
            body = memoryview(request)[IN_HEADER.size :]
            if opcode in (FORGET, BATCH_FORGET, INTERRUPT):
                continue
            try:
                reply = self.handle(opcode, node, body)
                error = 0
            except OSError as exc:
                reply, error = b"", -(exc.errno or errno.EIO)
            try:
                header = OUT_HEADER.pack(OUT_HEADER.size + len(reply), error, unique)
                os.write(self.fd, header + reply)
            except OSError as exc:
                if exc.errno != errno.ENOENT:  # the request was interrupted meanwhile
                    raise
            if opcode == DESTROY:
                return

    def handle(self, op: int, node: int, body: memoryview) -> bytes:
        if op == INIT:
            _major, _minor, readahead, flags = INIT_IN.unpack_from(body)
            wanted = (FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_MAX_PAGES) & flags
            return INIT_OUT.pack(
                7, KERNEL_MINOR, readahead, wanted, 16, 12, MAX_WRITE, 1, MAX_PAGES, 0, 0, 0
            )
        if op == DESTROY:
            return b""
        if op == LOOKUP:
            rel = self._child(node, bytes(body).rstrip(b"\0"))
            os.lstat(self._real(rel))
            return self._entry(self._node(rel))
        if node not in self.paths and op not in (READ, WRITE, FSYNC, RELEASE, FLUSH):
            raise OSError(errno.ENOENT, "stale node")
        if op == GETATTR:
            return ATTR_OUT.pack(VALID, 0, 0) + self._attr(node)
        if op == SETATTR:
            return self._setattr(node, body)
        if op in (OPEN, OPENDIR):
            if op == OPENDIR:
                return self._opendir(node)
            self._file(node).opens += 1
            return OPEN_OUT.pack(node, 0, 0)
        if op == READ:
            fh, offset, size, *_ = READ_IN.unpack_from(body)
            if fh in self.dirs:
                return self._readdir(fh, offset, size)
            return self.files[fh].read(offset, size)
        if op == READDIR:
            fh, offset, size, *_ = READ_IN.unpack_from(body)
            return self._readdir(fh, offset, size)
        if op == WRITE:
            fh, offset, size, *_ = WRITE_IN.unpack_from(body)
            data = body[WRITE_IN.size : WRITE_IN.size + size]
            self.files[fh].write(offset, bytes(data))
            return WRITE_OUT.pack(size, 0)
        if op == FSYNC:
            (fh,) = struct.unpack_from("<Q", body)
            self.files[fh].sync()
            return b""
        if op in (FLUSH, FSYNCDIR, ACCESS):
            return b""
        if op == RELEASE:
            fh, *_ = RELEASE_IN.unpack_from(body)
            state = self.files.get(fh)
            if state is not None:
                state.opens -= 1
                self._maybe_close(fh)
            return b""
        if op == RELEASEDIR:
            fh, *_ = RELEASE_IN.unpack_from(body)
            self.dirs.pop(fh, None)
            return b""
        if op == CREATE:
            return self._create(node, body)
        if op == MKNOD:
            mode, _rdev, umask, _ = MKNOD_IN.unpack_from(body)
            if not stat.S_ISREG(mode):
                raise OSError(errno.EPERM, "only regular files")
            rel = self._child(node, bytes(body[MKNOD_IN.size :]).rstrip(b"\0"))
            os.close(os.open(self._real(rel), os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode & ~umask))
            return self._entry(self._node(rel))
        if op == MKDIR:
            mode, umask = MKDIR_IN.unpack_from(body)
            rel = self._child(node, bytes(body[MKDIR_IN.size :]).rstrip(b"\0"))
            os.mkdir(self._real(rel), mode & ~umask & 0o7777)
            return self._entry(self._node(rel))
        if op in (UNLINK, RMDIR):
            rel = self._child(node, bytes(body).rstrip(b"\0"))
            (os.unlink if op == UNLINK else os.rmdir)(self._real(rel))
            self._drop_name(rel)
            return b""
        if op == RENAME:
            (new_parent,) = RENAME_IN.unpack_from(body)
            old_name, new_name = bytes(body[RENAME_IN.size :]).split(b"\0")[:2]
            old = self._child(node, old_name)
            new = self._child(new_parent, new_name)
            os.rename(self._real(old), self._real(new))
            if old != new:
                self._drop_name(new)
                for path in [p for p in self.ids if p == old or p.startswith(old + "/")]:
                    moved = new + path[len(old) :]
                    n = self.ids.pop(path)
                    self.ids[moved] = n
                    self.paths[n] = moved
            return b""
        if op == STATFS:
            st = os.statvfs(self.backing)
            return KSTATFS.pack(
                st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree,
                st.f_bsize, st.f_namemax, st.f_frsize, 0,
            )  # fmt: skip
        raise OSError(errno.ENOSYS, "not implemented")

    def _setattr(self, node: int, body: memoryview) -> bytes:
        (valid, _, _fh, size, _lock, atime, mtime, _ctime, atimens, mtimens, _ctimens, mode,
         _, uid, gid, _) = SETATTR_IN.unpack_from(body)  # fmt: skip
        real = self._real(self.paths[node])
        if valid & FATTR_MODE:
            os.chmod(real, stat.S_IMODE(mode))
        if valid & (FATTR_UID | FATTR_GID):
            os.chown(real, uid if valid & FATTR_UID else -1, gid if valid & FATTR_GID else -1)
        if valid & FATTR_SIZE:
            state = self._file(node)
            state.truncate(size)
            self._maybe_close(node)
        if valid & (FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW):
            st = os.lstat(real)
            now = time.time_ns()
            a = now if valid & FATTR_ATIME_NOW else atime * 1_000_000_000 + atimens
            m = now if valid & FATTR_MTIME_NOW else mtime * 1_000_000_000 + mtimens
            os.utime(
                real,
                ns=(
                    a if valid & (FATTR_ATIME | FATTR_ATIME_NOW) else st.st_atime_ns,
                    m if valid & (FATTR_MTIME | FATTR_MTIME_NOW) else st.st_mtime_ns,
                ),
            )
        return ATTR_OUT.pack(VALID, 0, 0) + self._attr(node)

    def _create(self, parent: int, body: memoryview) -> bytes:
        flags, mode, umask, _ = CREATE_IN.unpack_from(body)
        rel = self._child(parent, bytes(body[CREATE_IN.size :]).rstrip(b"\0"))
        create = os.O_CREAT | os.O_WRONLY | (flags & os.O_EXCL)
        os.close(os.open(self._real(rel), create, mode & ~umask & 0o7777))
        node = self._node(rel)
        state = self._file(node)
        if flags & os.O_TRUNC:
            state.truncate(0)
        state.opens += 1
        return self._entry(node) + OPEN_OUT.pack(node, 0, 0)

    def _opendir(self, node: int) -> bytes:
        real = self._real(self.paths[node])
        entries = [(".", os.lstat(real).st_ino, stat.S_IFDIR), ("..", 1, stat.S_IFDIR)]
        with os.scandir(real) as it:
            for e in sorted(it, key=lambda e: e.name):
                st = e.stat(follow_symlinks=False)
                entries.append((e.name, st.st_ino, stat.S_IFMT(st.st_mode)))
        fh = self.next_fh = self.next_fh + 1
        fh += 1 << 40  # never a node ID (file handles are node IDs)
        self.dirs[fh] = entries
        return OPEN_OUT.pack(fh, 0, 0)

    def _readdir(self, fh: int, offset: int, size: int) -> bytes:
        out = bytearray()
        entries = self.dirs.get(fh, [])
        for index in range(offset, len(entries)):
            name, ino, kind = entries[index]
            raw = os.fsencode(name)
            record = DIRENT.pack(ino, index + 1, len(raw), kind >> 12) + raw
            record += bytes(-len(record) % 8)
            if len(out) + len(record) > size:
                break
            out += record
        return bytes(out)

    def power_cut(self, tear: bool) -> str:
        """Discard every unsynced write (keeping a torn prefix of each with `tear`)."""
        dirty = [s for s in self.files.values() if s.dirty and not s.orphan]
        lost = sum(sum(len(d) for _, d in s.pending) for s in dirty)
        kept = sum(s.tear(self.rng) for s in dirty) if tear else 0
        for state in self.files.values():
            os.close(state.fd)
        self.files.clear()
        return (
            f"power cut: {len(dirty)} files had {lost} unsynced bytes; "
            f"{kept} kept{' (torn prefixes)' if tear else ''}"
        )


def _serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.fusedisk")
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    server = Server(Path(args.backing).resolve(), Path(args.mountpoint).resolve(), args.seed)

    def cut(signum: int, _frame: Any) -> None:
        raise PowerCut(signum == signal.SIGUSR1)

    signal.signal(signal.SIGTERM, cut)
    signal.signal(signal.SIGUSR1, cut)
    server.mount()
    print(json.dumps({"mounted": str(server.mountpoint)}), flush=True)
    try:
        server.serve()
        print("unmounted", flush=True)
    except PowerCut as exc:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        server.unmount()
        print(server.power_cut(exc.tear), flush=True)
    finally:
        server.unmount()
    return 0


# -- client ---------------------------------------------------------------------------------


class FuseDisk:
    """A FUSE disk mounted at `mountpoint` over `backing` (both made if missing), served by
    a subprocess writing to `log`."""

    def __init__(self, backing: Path, mountpoint: Path, log: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def mount(self, seed: int = 0, timeout: float = 10.0) -> None:
        assert self.proc is None, "already mounted"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log, "ab") as log:
            argv = [sys.executable, "-m", "tests.faults.fusedisk", str(self.backing)]
            self.proc = subprocess.Popen(
                [*argv, str(self.mountpoint), f"--seed={seed}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _mounted(self.mountpoint.resolve()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the FUSE disk did not mount: {self.log_tail()}")
            time.sleep(0.02)

    def power_cut(self, rng: random.Random | None = None, tear: bool = True) -> str:
        """Cut the power: unsynced data is dropped (torn prefixes kept with `tear`); the
        disk is unmounted. Stop the processes that use it first (kill -9)."""
        if self.proc is None:
            return "not mounted"
        self.proc.send_signal(signal.SIGUSR1 if tear else signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self._force_unmount()
        return self.log_tail(1).strip()

    def _force_unmount(self) -> None:
        if _mounted(self.mountpoint.resolve()):
            _libc().umount2(str(self.mountpoint.resolve()).encode(), MNT_DETACH)

    def log_tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        """Unmount (what was not fsynced is dropped) and stop the server."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None
        self._force_unmount()


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1:]))
