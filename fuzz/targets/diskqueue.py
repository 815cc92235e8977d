"""The disk queue's readers (trionsq.diskqueue): fuzzed bytes written as a queue's segment and
metadata files in a scratch directory, then a `DiskQueue` opened on them and drained with
`take`.

Input: the first byte picks options (metadata present, consumption tracking, the segment
numbers, sizes), then up to four files, each ``[2-byte length][bytes]``: the metadata text
(when present), then segments 0, 1, 2 (or 3, 4, 5).

What must hold: recovery is clean. Opening and draining raise nothing (bad segments are
renamed ``.bad``); `depth` is never negative, and 0 once drained; every frame handed out is a
message frame within the size limits; the number of frames is at most the number of records
the segments hold; neither opening nor draining tries segment numbers one at a time (file
opens stay within a small multiple of the files there are, however far apart the metadata's
numbers are: `BoundedFS` fails the input at once rather than letting it run for hours);
`close` closes every file it opened, and its metadata reopens to an empty queue.
"""

from __future__ import annotations

import logging
import os
import struct
import tempfile

from trionsq.diskqueue.files import data_file_name, metadata_file_name
from trionsq.diskqueue.fs import LocalFileSystem
from trionsq.diskqueue.queue import DiskQueue
from trionsq.protocol.message import MESSAGE_HEADER_SIZE, encode_message

from ..common import check

NAME = "fz"
MAX_MSG = 1024 + MESSAGE_HEADER_SIZE
_dir: str | None = None
logging.getLogger("trionsq.diskqueue").disabled = True


def _scratch() -> str:
    global _dir
    if _dir is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        _dir = tempfile.mkdtemp(prefix="trionsq-fuzz-dq-", dir=base)
    for name in os.listdir(_dir):
        os.remove(os.path.join(_dir, name))
    return _dir


def _files(data: bytes) -> list[bytes]:
    out = []
    pos = 0
    while pos + 2 <= len(data) and len(out) < 4:
        (n,) = struct.unpack_from(">H", data, pos)
        out.append(data[pos + 2 : pos + 2 + n])
        pos += 2 + n
    return out


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


class BoundedFS(LocalFileSystem):
    """The local file system, failing once more than `budget` files were opened."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        self.budget -= 1
        check(self.budget >= 0, f"too many file opens (at {os.path.basename(path)})")
        return super().open(path, flags, mode)


def _open(path: str, selector: int, files: int = 4) -> DiskQueue:
    return DiskQueue(
        NAME,
        path,
        max_bytes_per_file=(1 << 20) if selector & 4 else 100,
        min_msg_size=MESSAGE_HEADER_SIZE,
        max_msg_size=MAX_MSG,
        sync_every=1 << 30,
        track_consumption=bool(selector & 2),
        fs=BoundedFS(8 * files + 16),
    )


def test_one_input(data: bytes) -> None:
    if not data:
        return
    selector = data[0]
    files = _files(data[1:])
    path = _scratch()
    if selector & 1 and files:
        with open(metadata_file_name(path, NAME), "wb") as f:
            f.write(files.pop(0))
    first = 3 if selector & 8 else 0
    records = 0
    for i, content in enumerate(files):
        with open(data_file_name(path, NAME, first + i), "wb") as f:
            f.write(content)
        records += len(content) // (4 + MESSAGE_HEADER_SIZE) + 1
    fds = _fd_count()
    q = _open(path, selector)
    check(q.depth >= 0, f"depth {q.depth} at open")
    taken = 0
    for _ in range(records + 2):
        frames = q.take(1 + selector % 5)
        check(q.depth >= 0, "negative depth")
        if not frames:
            break
        for frame in frames:
            check(len(frame) >= 8 + MESSAGE_HEADER_SIZE, "short frame")
            size, frame_type = struct.unpack_from(">Ii", frame)
            check(size == len(frame) - 4 and frame_type == 2, "bad frame header")
            check(len(frame) - 8 <= MAX_MSG, "frame over the size limit")
            if q._track:
                q.release(frame[18:34])
        taken += len(frames)
    check(not q.take(10), "queue not drained")
    check(taken <= records, f"{taken} frames from at most {records} records")
    check(q.depth == 0, f"depth {q.depth} after draining")
    q.close()
    check(_fd_count() == fds, "file descriptors leaked")
    again = _open(path, selector)
    check(again.depth == 0 and not again.take(1), "reopened queue is not empty")
    again.close()


def seeds() -> list[bytes]:
    def file(content: bytes) -> bytes:
        return struct.pack(">H", len(content)) + content

    def record(body: bytes) -> bytes:
        payload = encode_message(b"0123456789abcdef", 1, 1, body)
        return struct.pack(">I", len(payload)) + payload

    seg = record(b"one") + record(b"two") + record(b"three")
    meta = b"3\n0,0\n0,%d\n" % len(seg)
    return [
        b"\x05" + file(meta) + file(seg),
        b"\x07" + file(meta) + file(seg),
        b"\x04" + file(seg) + file(seg),
        b"\x01" + file(b"2\n0,0\n1,0\n") + file(seg[:40]) + file(seg),
        b"\x05" + file(b"9\n0,5\n0,1\n") + file(seg),
        b"\x0c" + file(seg + b"\x00\x00\x00\x01x") + file(seg),
    ]
