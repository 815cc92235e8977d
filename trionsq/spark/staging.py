"""The write-ahead staging log of the executor-side source: what each task of a micro-batch took
from NSQ, made durable before a single message is FIN'd, so a re-run of the same (batch,
partition) returns the same rows from the log instead of NSQ.

Layout under the staging location (a POSIX path the driver and every executor see, or an
``s3://bucket/prefix``: `stores`):

    b<batch>/p<partition>.arrow   the rows of one task (an Arrow IPC file, SOURCE_SCHEMA layout)
    b<batch>/p<partition>.fin     nsqd confirmed the FINs of those rows (CLS answered)
    unconfirmed/b<batch>-p<partition>.arrow   staged rows whose FINs were never confirmed
    b<batch>/committed            Spark committed the batch (a tombstone, kept for a while)

A staging file is claimed atomically (create if absent: ``os.link`` on POSIX, a conditional PUT
on S3), so of two attempts of a task only one wins. `commit` deletes the files of committed
batches; one without its ``.fin`` marker is moved to ``unconfirmed/`` instead: its messages may
come back from nsqd (attempts > 1), and the task that receives them finds their ids there and
drops them (FIN, no row).

A straggling attempt of a task (a lost executor's, still running) can claim its file after the
batch was committed and its files deleted: rows nobody will read. `commit` therefore writes
the batch's tombstone before it deletes anything, and an attempt checks it after its claim:
if the batch is committed it discards its file and gives its messages back (REQ) rather than
FIN them. A file found beside a tombstone is such a straggler's: never counted as staged."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from .stores import Store, open_store

__all__ = ["StagingLog"]

log = logging.getLogger("trionsq.spark")

_BATCH_DIR = re.compile(r"^b(\d+)$")
_PART_FILE = re.compile(r"^p(\d+)\.arrow$")
_UNCONFIRMED = "unconfirmed"
_COMMITTED = "committed"
#: How many batches back tombstones are kept: a straggler later than that is not caught
#: (Spark keeps its own logs of the last 100 batches, spark.sql.streaming.minBatchesToRetain).
_TOMBSTONES_KEPT = 100


def _name(batch: int, partition: int) -> str:
    return f"b{batch}/p{partition}.arrow"


def _moved(name: str) -> str:
    """Where `commit` moves the unconfirmed staging file `name` (``b3/p0.arrow``)."""
    return f"{_UNCONFIRMED}/{name.replace('/', '-')}"


class StagingLog:
    """The staging files of one streaming query (its ``stagingLocation``)."""

    def __init__(self, root: str) -> None:
        self.store: Store = open_store(root)
        self.root = self.store.root

    def batch_dir(self, batch: int) -> str:
        return os.path.join(self.root, f"b{batch}")

    def path(self, batch: int, partition: int) -> str:
        return os.path.join(self.root, _name(batch, partition))

    def read(self, batch: int, partition: int) -> Any | None:
        """The staged rows of (batch, partition) as an Arrow table, or None if not staged."""
        return self._read(_name(batch, partition))

    def _read(self, name: str) -> Any | None:
        import pyarrow as pa

        source = self.store.open(name)
        if source is None:
            return None
        with source:
            return pa.ipc.open_file(source).read_all()

    def write(self, batch: int, partition: int, record_batch: Any) -> bool:
        """Stage `record_batch` durably as (batch, partition). False if another attempt staged
        it first (its rows stand; the caller must not FIN its own messages)."""
        import pyarrow as pa

        def encode(sink: Any) -> None:
            with pa.ipc.new_file(sink, record_batch.schema) as writer:
                writer.write_batch(record_batch)

        return self.store.claim(_name(batch, partition), encode)

    def committed(self, batch: int) -> bool:
        """True once `commit` covered `batch` (its tombstone is there)."""
        source = self.store.open(f"b{batch}/{_COMMITTED}")
        if source is None:
            return False
        source.close()
        return True

    def discard(self, batch: int, partition: int) -> None:
        """Remove a straggler's staging file of a committed batch."""
        self.store.delete([_name(batch, partition)])

    def confirm(self, batch: int, partition: int) -> None:
        """Record that nsqd processed the FINs of (batch, partition) (no fsync: a lost marker
        only keeps the file as unconfirmed)."""
        self.store.mark(f"b{batch}/p{partition}.fin")

    def unconfirmed_ids(self, nsqd: str) -> set[str]:
        """Ids of messages from `nsqd` staged in files whose FINs were not confirmed (yet):
        a redelivered message among them is already in some batch's rows."""
        import pyarrow.compute as pc

        ids: set[str] = set()
        for name in self._unconfirmed_files():
            table = self._read(name)
            if table is None and not name.startswith(f"{_UNCONFIRMED}/"):
                table = self._read(_moved(name))  # committed meanwhile: moved there, or gone
            if table is None:
                continue
            mine = table.filter(pc.equal(table["nsqd"], nsqd))
            ids.update(mine["id"].to_pylist())
        return ids

    def _unconfirmed_files(self) -> list[str]:
        found: list[str] = []
        for directory, files in self.store.listing().items():
            if directory == _UNCONFIRMED:
                found += [f"{directory}/{f}" for f in sorted(files)]
            elif _BATCH_DIR.match(directory) and _COMMITTED not in files:
                for f in sorted(files):
                    m = _PART_FILE.match(f)
                    if m and f"p{m.group(1)}.fin" not in files:
                        found.append(f"{directory}/{f}")
        return found

    def commit(self, batch: int) -> None:
        """Spark committed every batch up to `batch`: drop their staging files (keeping the
        unconfirmed ones under ``unconfirmed/``)."""
        for directory, files in self.store.listing().items():
            m = _BATCH_DIR.match(directory)
            if not m or int(m.group(1)) > batch:
                continue
            if _COMMITTED in files or int(m.group(1)) <= batch - _TOMBSTONES_KEPT:
                # Committed before: what is beside the tombstone is a straggler's; and an
                # old tombstone goes (last, so the directory is never left without it).
                old = int(m.group(1)) <= batch - _TOMBSTONES_KEPT
                names = [f"{directory}/{f}" for f in files if f != _COMMITTED]
                self.store.delete(names + ([f"{directory}/{_COMMITTED}"] if old else []))
                if old:
                    self.store.drop_dir(directory)
                continue
            # The tombstone first, durably: an attempt that claims after the deletes below
            # must find it.
            self.store.claim(f"{directory}/{_COMMITTED}", lambda sink: None)
            gone: list[str] = []
            for f in files:
                part = _PART_FILE.match(f)
                name = f"{directory}/{f}"
                if part and f"p{part.group(1)}.fin" not in files:
                    self.store.move(name, _moved(name))
                    log.warning(
                        "staging %s/%s: FINs never confirmed, kept in %s/%s",
                        self.root,
                        name,
                        self.root,
                        _UNCONFIRMED,
                    )
                else:
                    gone.append(name)
            self.store.delete(gone)
