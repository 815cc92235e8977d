"""Message IDs as NSQ generates them (reference §1.6).

An ID is the lowercase hex of ``((ts - twepoch) << 22) | (node_id << 12) | sequence``
with ``ts = unix_ns >> 20``; each topic has its own generator, strictly increasing.
"""

from __future__ import annotations

import hashlib
import socket
import time
import zlib

TWEPOCH = 1288834974288
NODE_ID_BITS = 10
SEQUENCE_BITS = 12
MAX_NODE_ID = (1 << NODE_ID_BITS) - 1
_SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1


class GUIDError(Exception):
    """No ID can be made right now (clock went backwards or the sequence wrapped)."""


def default_node_id(hostname: str | None = None) -> int:
    """CRC32-IEEE of the raw MD5 digest of the hostname, mod 1024 (Go nsqd's default)."""
    host = socket.gethostname() if hostname is None else hostname
    return zlib.crc32(hashlib.md5(host.encode()).digest()) % 1024


class GUIDFactory:
    """Per-topic ID generator."""

    __slots__ = ("_hex", "_hex_ts", "_last_id", "_last_ts", "_node_bits", "_sequence")

    def __init__(self, node_id: int) -> None:
        if not 0 <= node_id <= MAX_NODE_ID:
            raise ValueError(f"node id {node_id} must be in [0, {MAX_NODE_ID}]")
        self._node_bits = node_id << SEQUENCE_BITS
        self._sequence = 0
        self._last_ts = -1
        self._last_id = -1
        # The hex of the tick and node bits of `_hex_ts` (an ID's first 13 digits).
        self._hex_ts = -1
        self._hex = b""

    def new_guid(self, now_ns: int | None = None) -> int:
        """The next ID as an integer, or GUIDError when none can be made at this instant."""
        ts = (time.time_ns() if now_ns is None else now_ns) >> 20
        if ts < self._last_ts:
            raise GUIDError("time has gone backwards")
        if ts == self._last_ts:
            self._sequence = (self._sequence + 1) & _SEQUENCE_MASK
            if self._sequence == 0:
                raise GUIDError("sequence expired")
        else:
            self._sequence = 0
        self._last_ts = ts
        guid = ((ts - TWEPOCH) << 22) | self._node_bits | self._sequence
        if guid <= self._last_id:
            raise GUIDError("ID went backward")
        self._last_id = guid
        return guid

    def next_id(self) -> bytes:
        """The next 16-byte hex ID, never blocking.

        Where nsqd sleeps until the clock allows a new ID (the clock went backwards, or this
        tick's 4096 IDs are used), a sleep here would stall the whole event loop: instead the
        last tick's sequence continues, moving to the next tick when it wraps. IDs stay unique
        and strictly increasing, and run ahead of the clock by at most rate / 4096 ticks.
        """
        try:
            return b"%016x" % self.new_guid()
        except GUIDError:
            return b"%016x" % self._continue_last_tick()

    def _continue_last_tick(self) -> int:
        self._sequence = (self._sequence + 1) & _SEQUENCE_MASK
        if self._sequence == 0:
            self._last_ts += 1
        guid = ((self._last_ts - TWEPOCH) << 22) | self._node_bits | self._sequence
        self._last_id = guid
        return guid

    def next_ids(self, count: int) -> list[bytes]:
        """`count` consecutive IDs (one clock read when the sequence has room).

        The publish hot path (every PUB and MPUB): when the clock's tick has room for the whole
        block, the IDs are one arithmetic run, formatted from a table of the sequence's three
        hex digits (the low 12 bits) after the tick's 13, with no per-ID call or branch."""
        ts = time.time_ns() >> 20
        last_ts = self._last_ts
        if ts > last_ts:
            first = 0
        elif ts == last_ts:
            first = self._sequence + 1
        else:
            first = _SEQUENCE_MASK + 1  # the clock went back: the careful path below
        end = first + count
        if end <= _SEQUENCE_MASK + 1:
            tick = ((ts - TWEPOCH) << (NODE_ID_BITS + SEQUENCE_BITS)) | self._node_bits
            if tick | first > self._last_id:
                if ts != self._hex_ts:
                    self._hex_ts = ts
                    self._hex = b"%013x" % (tick >> SEQUENCE_BITS)
                self._last_ts = ts
                self._sequence = end - 1
                self._last_id = tick | (end - 1)
                high = self._hex
                if count == 1:  # PUB: no comprehension to set up
                    return [high + _SEQUENCE_HEX[first]]
                return [high + digits for digits in _SEQUENCE_HEX[first:end]]
        out = []
        now = time.time_ns()
        for _ in range(count):
            try:
                out.append(b"%016x" % self.new_guid(now))
            except GUIDError:
                out.append(self.next_id())
                now = time.time_ns()
        return out


#: The last three hex digits of an ID are its 12-bit sequence.
_SEQUENCE_HEX = [b"%03x" % n for n in range(_SEQUENCE_MASK + 1)]


def guid_to_hex(guid: int) -> bytes:
    return b"%016x" % guid
