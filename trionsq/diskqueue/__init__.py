"""The disk queue behind topics and channels, in go-diskqueue's on-disk format
(docs/protocol.md §7).

The package's names are imported when first used, so that a submodule without trio (`fs`,
`files`) can be imported alone: nsqd opens its data path before it imports trio
(trionsq/nsqd/opening.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .queue import DiskQueue, DiskQueueError, frames_from_records
    from .syncer import DiskSyncer

__all__ = ["DiskQueue", "DiskQueueError", "DiskSyncer", "frames_from_records"]

_HOMES = {
    "DiskQueue": "queue",
    "DiskQueueError": "queue",
    "frames_from_records": "queue",
    "DiskSyncer": "syncer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
