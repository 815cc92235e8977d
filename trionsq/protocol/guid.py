"""Message IDs as NSQ generates them (docs/protocol.md §1.6).

An ID is the lowercase hex of ``((ts - twepoch) << 22) | (node_id << 12) | sequence``
with ``ts = unix_ns >> 20``, strictly increasing. nsqd has one generator for all its topics
(Go's has one per topic).
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
    """An ID generator (see the module docstring)."""

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
        # From the last ID made, not from `_sequence`: a refused `new_guid` has moved that on
        # (to 0 when the tick's sequence wrapped) without making an ID. (`new_guid` refuses
        # only once an ID has been made.)
        last = self._last_id
        sequence = ((last & _SEQUENCE_MASK) + 1) & _SEQUENCE_MASK
        tick = (last >> 22) + (sequence == 0)
        self._last_ts = tick + TWEPOCH
        self._sequence = sequence
        guid = (tick << 22) | self._node_bits | sequence
        self._last_id = guid
        return guid

    def next_ids(self, count: int) -> list[bytes]:
        """`count` consecutive IDs (one clock read when the sequence has room)."""
        return [
            high + digits
            for high, first, end in self.next_id_runs(count)
            for digits in SEQUENCE_HEX[first:end]
        ]

    def next_id_runs(self, count: int) -> list[tuple[bytes, int, int]]:
        """`count` consecutive IDs as runs ``(high, first, end)``: the IDs ``high +
        SEQUENCE_HEX[n]`` for n in ``range(first, end)``, `high` being an ID's first 13 hex
        digits (its tick and node) and the last three its 12-bit sequence.

        The publish hot path (every PUB and MPUB): when the clock's tick has room for the whole
        block, it is one run, one clock read and no per-ID work here; the caller formats each
        ID where it builds the message's frame. Otherwise (the tick's sequence is used up, or
        the clock went back) the IDs come one at a time as `next_id` makes them."""
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
                return [(self._hex, first, end)]
        runs = []
        now = time.time_ns()
        for _ in range(count):
            try:
                guid = self.new_guid(now)
            except GUIDError:
                guid = int(self.next_id(), 16)
                now = time.time_ns()
            sequence = guid & _SEQUENCE_MASK
            runs.append((b"%013x" % (guid >> SEQUENCE_BITS), sequence, sequence + 1))
        return runs


#: The last three hex digits of an ID are its 12-bit sequence.
SEQUENCE_HEX = [b"%03x" % n for n in range(_SEQUENCE_MASK + 1)]


def guid_to_hex(guid: int) -> bytes:
    return b"%016x" % guid
