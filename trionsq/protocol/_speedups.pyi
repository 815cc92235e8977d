"""Types of the compiled loops (_speedups.c)."""

DONE: int
NEED_BYTES: int
IDS_USED: int
BAD_SIZE: int

def frame_mpub(
    buf: bytes | bytearray | memoryview,
    pos: int,
    left: int,
    max_msg: int,
    timestamp: int,
    high: bytes,
    sequence: int,
    run_end: int,
    out: list[bytes],
    /,
) -> tuple[int, int, int, int, int]: ...
def scan_fins(buf: bytes, pos: int, /) -> tuple[list[bytes], int]: ...
def crc32c(data: bytes | bytearray | memoryview, crc: int = 0, /) -> int: ...
