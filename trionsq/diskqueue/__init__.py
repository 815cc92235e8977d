"""The disk queue behind topics and channels, in go-diskqueue's on-disk format (reference §7)."""

from .queue import DiskQueue, DiskQueueError, frames_from_records
from .syncer import DiskSyncer

__all__ = ["DiskQueue", "DiskQueueError", "DiskSyncer", "frames_from_records"]
