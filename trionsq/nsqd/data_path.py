"""nsqd's data path at start-up: locked as Go nsqd locks it, then proved usable (a file
created, written, fsynced and removed in it) before nsqd accepts a message it could not keep.

Go nsqd notices an unusable directory only when its first metadata write fails; trionsq
checks first, so that a read-only mount, an immutable directory or a file in place of the
directory stops nsqd with one line naming the path and the errno, before it listens.
"""

from __future__ import annotations

import errno
import os

from ..diskqueue.fs import O_CREAT, O_TRUNC, O_WRONLY, FileSystem
from ..goerrors import errno_text, open_error, path_error

#: The file the check writes and removes (beside nsqd.dat; a crash may leave it, harmlessly).
CHECK_FILE_NAME = "nsqd.dat.write-check.tmp"
#: What the check writes: one page, so that a disk with no block left refuses it.
_CHECK_DATA = b"\0" * 4096


class DataPathError(Exception):
    """The data path cannot be used; the message is the FATAL line's text."""


def lock_data_path(fs: FileSystem, path: str) -> int:
    """Take the data path's exclusive lock (Go's dirlock); the handle to unlock it with."""
    try:
        return fs.lock_dir(path)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            reason = (
                f"cannot flock directory {path} - {errno_text(err)} "
                "(possibly in use by another instance of nsqd)"
            )
        else:
            reason = open_error(path, err)
        raise DataPathError(f"failed to lock data-path: {reason}") from err


def check_writable(fs: FileSystem, path: str) -> None:
    """Create, write, fsync and remove a file in `path`, and sync the directory: what the
    disk queues and nsqd.dat will do. Blocking (a worker thread runs it)."""
    check_file = os.path.join(path, CHECK_FILE_NAME)
    step, target, fd = "open", check_file, None
    try:
        fd = fs.open(check_file, O_WRONLY | O_CREAT | O_TRUNC)
        step = "write"
        fs.pwrite(fd, _CHECK_DATA, 0)
        step = "sync"
        fs.fsync(fd)
        step = "close"
        fs.close(fd)
        fd = None
        step = "remove"
        fs.remove(check_file)
        step, target = "sync", path
        fs.fsync_dir(path)
    except OSError as err:
        if fd is not None:
            _close_quietly(fs, fd)
        name = errno.errorcode.get(err.errno or 0)
        suffix = f" ({name})" if name else ""
        raise DataPathError(
            f"data-path {path} is not writable - {path_error(step, target, err)}{suffix}"
        ) from err


def _close_quietly(fs: FileSystem, fd: int) -> None:
    try:
        fs.close(fd)
    except OSError:
        pass
