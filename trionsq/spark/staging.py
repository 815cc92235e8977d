"""The write-ahead staging log of the executor-side source: what each task of a micro-batch took
from NSQ, made durable before a single message is FIN'd, so a re-run of the same (batch,
partition) returns the same rows from the log instead of NSQ.

Layout under the staging location (a POSIX path the driver and every executor see):

    b<batch>/p<partition>.arrow   the rows of one task (an Arrow IPC file, SOURCE_SCHEMA layout)
    b<batch>/p<partition>.fin     nsqd confirmed the FINs of those rows (CLS answered)
    unconfirmed/b<batch>-p<partition>.arrow   staged rows whose FINs were never confirmed

A staging file is written under a temporary name, fsync'd, then claimed with ``os.link`` (which
fails if the name exists, so of two attempts of a task only one wins) and the directory fsync'd.
`commit` deletes the files of committed batches; one without its ``.fin`` marker is moved to
``unconfirmed/`` instead: its messages may come back from nsqd (attempts > 1), and the task that
receives them finds their ids there and drops them (FIN, no row)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import urllib.parse
import uuid
from typing import Any

__all__ = ["StagingLog"]

log = logging.getLogger("trionsq.spark")

_BATCH_DIR = re.compile(r"^b(\d+)$")
_PART_FILE = re.compile(r"^p(\d+)\.arrow$")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StagingLog:
    """The staging files of one streaming query (its ``stagingLocation``)."""

    def __init__(self, root: str) -> None:
        if root.startswith("file:"):
            root = urllib.parse.urlparse(root).path
        self.root = root

    def batch_dir(self, batch: int) -> str:
        return os.path.join(self.root, f"b{batch}")

    def path(self, batch: int, partition: int) -> str:
        return os.path.join(self.batch_dir(batch), f"p{partition}.arrow")

    def read(self, batch: int, partition: int) -> Any | None:
        """The staged rows of (batch, partition) as an Arrow table, or None if not staged."""
        import pyarrow as pa

        try:
            with pa.memory_map(self.path(batch, partition)) as source:
                return pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            return None

    def write(self, batch: int, partition: int, record_batch: Any) -> bool:
        """Stage `record_batch` durably as (batch, partition). False if another attempt staged
        it first (its rows stand; the caller must not FIN its own messages)."""
        import pyarrow as pa

        directory = self.batch_dir(batch)
        os.makedirs(directory, exist_ok=True)
        final = self.path(batch, partition)
        temp = f"{final}.tmp-{uuid.uuid4().hex}"
        try:
            with open(temp, "wb") as f:
                with pa.ipc.new_file(f, record_batch.schema) as writer:
                    writer.write_batch(record_batch)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temp, final)
            except FileExistsError:
                return False
            _fsync_dir(directory)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def confirm(self, batch: int, partition: int) -> None:
        """Record that nsqd processed the FINs of (batch, partition) (no fsync: a lost marker
        only keeps the file as unconfirmed)."""
        with open(os.path.join(self.batch_dir(batch), f"p{partition}.fin"), "wb"):
            pass

    def unconfirmed_ids(self, nsqd: str) -> set[str]:
        """Ids of messages from `nsqd` staged in files whose FINs were not confirmed (yet):
        a redelivered message among them is already in some batch's rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ids: set[str] = set()
        for path in self._unconfirmed_files():
            try:
                with pa.memory_map(path) as source:
                    table = pa.ipc.open_file(source).read_all()
            except FileNotFoundError:
                continue  # committed and moved meanwhile: found under unconfirmed/ or gone
            mine = table.filter(pc.equal(table["nsqd"], nsqd))
            ids.update(mine["id"].to_pylist())
        return ids

    def _unconfirmed_files(self) -> list[str]:
        found: list[str] = []
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return found
        for name in names:
            directory = os.path.join(self.root, name)
            if name == "unconfirmed":
                found += [os.path.join(directory, f) for f in sorted(os.listdir(directory))]
            elif _BATCH_DIR.match(name):
                files = set(os.listdir(directory))
                for f in sorted(files):
                    m = _PART_FILE.match(f)
                    if m and f"p{m.group(1)}.fin" not in files:
                        found.append(os.path.join(directory, f))
        return found

    def commit(self, batch: int) -> None:
        """Spark committed every batch up to `batch`: drop their staging files (keeping the
        unconfirmed ones under ``unconfirmed/``)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return
        for name in names:
            m = _BATCH_DIR.match(name)
            if not m or int(m.group(1)) > batch:
                continue
            directory = os.path.join(self.root, name)
            files = set(os.listdir(directory))
            for f in files:
                part = _PART_FILE.match(f)
                path = os.path.join(directory, f)
                if part and f"p{part.group(1)}.fin" not in files:
                    keep = os.path.join(self.root, "unconfirmed")
                    os.makedirs(keep, exist_ok=True)
                    os.replace(path, os.path.join(keep, f"{name}-{f}"))
                    log.warning("staging %s: FINs never confirmed, kept in %s", path, keep)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            with contextlib.suppress(OSError):
                os.rmdir(directory)
