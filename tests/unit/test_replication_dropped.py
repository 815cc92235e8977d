"""The dropped file (`<topic>.replication.dropped`, replication_log.py): the IDs compaction
dropped, remembered across restarts in checksummed blocks, trimmed to the latest
DROPPED_MAX; a file of bare IDs (written before the checksums) is converted."""

from __future__ import annotations

from pathlib import Path

import pytest

from trionsq.nsqd.replication import log as replication_log
from trionsq.nsqd.replication.log import ID_HEADER, read_id_file, remember_dropped


def ids(start: int, count: int) -> list[bytes]:
    return [b"%016d" % i for i in range(start, start + count)]


def test_remembered_in_checksummed_blocks(tmp_path: Path) -> None:
    path = str(tmp_path / "t.replication.dropped")
    remember_dropped(path, set(ids(0, 3)))
    remember_dropped(path, set())
    remember_dropped(path, set(ids(3, 2)))
    assert Path(path).read_bytes().startswith(ID_HEADER)
    assert sorted(read_id_file(path)) == ids(0, 5)
    # A flipped bit in a block loses that block's IDs only (never a wrong ID remembered:
    # a neighbour's ID taken for dropped would make a live message look finished).
    data = bytearray(Path(path).read_bytes())
    data[len(ID_HEADER) + 8 + 5] ^= 0x04
    Path(path).write_bytes(bytes(data))
    assert sorted(read_id_file(path)) == ids(3, 2)


def test_trimmed_to_the_latest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replication_log, "DROPPED_MAX", 10)
    path = str(tmp_path / "t.replication.dropped")
    for start in range(0, 40, 5):
        remember_dropped(path, set(ids(start, 5)))
    kept = read_id_file(path)
    assert len(kept) <= 20 and set(ids(35, 5)) <= set(kept)
    assert not set(ids(0, 5)) & set(kept)


def test_bare_ids_of_an_earlier_trionsq_are_converted(tmp_path: Path) -> None:
    path = tmp_path / "t.replication.dropped"
    path.write_bytes(b"".join(ids(0, 4)))
    remember_dropped(str(path), set(ids(4, 2)))
    assert path.read_bytes().startswith(ID_HEADER)
    assert sorted(read_id_file(str(path))) == ids(0, 6)
