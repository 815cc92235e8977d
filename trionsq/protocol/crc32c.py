"""CRC-32C (Castagnoli): the checksum of the replication log's and FIN files' records and of
the disk queues' checksum side files. `crc32c(data, crc=0)` continues `crc` over `data`.

The compiled one (_speedups.c: the SSE4.2 instruction where the CPU has it, a table
otherwise) is used when built; the Python one (a table, a byte at a time: about a thousand
times slower) where it is not, and under TRIONSQ_PURE_PYTHON=1. Check value: crc32c(b"123456789")
is 0xE3069283.
"""

from __future__ import annotations

import os
from collections.abc import Callable

Crc = Callable[..., int]


def _table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c_python(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    table = _TABLE
    c = crc ^ 0xFFFFFFFF
    for byte in bytes(data):
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


COMPILED_CRC32C: Crc | None = None
try:
    from ._speedups import crc32c as COMPILED_CRC32C
except ImportError:  # not built: the Python one
    pass

crc32c: Crc = crc32c_python
if COMPILED_CRC32C is not None and not os.environ.get("TRIONSQ_PURE_PYTHON"):
    crc32c = COMPILED_CRC32C
