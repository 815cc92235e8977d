"""Incremental, sans-IO parser of V2 commands (client -> nsqd).

Theory of operation: `feed` appends received bytes; `next_command` returns the next complete
`Command`, None when more bytes are needed, or raises `ProtocolError` carrying the NSQ error
code, text and fatality. Checks run in nsqd's order (docs/protocol.md §1.3): for each command, the
checks nsqd makes before it reads the body (parameter count, names, numbers) raise as soon as
the line is complete, without waiting for a body that may never come; a size field is checked
as soon as its 4 bytes are in. An optional `check_line(name, params)` hook lets the daemon add
its own pre-body checks (connection state); it runs before the parser's own line checks. When
the peer's stream ends (EOF or a read deadline), `eof` raises the error nsqd sends for a body
cut short.

MPUB is read as nsqd reads it (docs/protocol.md §1.3, MPUB quirk): the declared body size is only
checked against ``max_body_size``; the message count and the messages are then read straight
from the stream, whatever the declared size says.

Framing (nsqd's publish hot path): a parser given `new_id_runs` (`GUIDFactory.next_id_runs`)
returns PUB, DPUB and MPUB bodies already as the daemon stores messages, each a message frame
(`message.encode_new_frames`: frame header, timestamp, attempts 0, a new ID, body), built in
the same pass that reads the records: the body is copied once, straight from the read into its
frame, after a prefix (header and the ID's first 13 digits) made once per body size and run of
IDs. `Command.body` is then a list of frames for all three. Without it, PUB and DPUB bodies are
`bytes` and MPUB's a list of them.

The two per-message loops (MPUB's framing, `take_fins`) also exist compiled, in
`_speedups.c` (built by setup.py where a C compiler is found): they are used when importable,
unless TRIONSQ_PURE_PYTHON is set; the Python loops here are the reference, and the tests and
fuzzers check the two agree.

Bytes are kept as the immutable `bytes` received (slicing is cheaper than a bytearray here);
a body still arriving is collected in chunks and joined once, so a large body costs no
quadratic copying.

Memory: what a connection holds grows with the bytes that arrived, never with the size a
client declares (bounded by --max-body-size). While a body is awaited, only the unconsumed
tail of the last read is kept (not the whole read), reads of at least `SMALL_READ` bytes are
kept as received, and smaller ones are copied into one growing `bytearray`: a body dribbled a
byte per read would otherwise cost a `bytes` object and a malloc chunk per byte (about 90 B of
RSS per byte received, measured). Once every command of a read is consumed, the read is let go.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable

from .commands import Command
from .errors import (
    E_BAD_BODY,
    E_BAD_MESSAGE,
    E_BAD_TOPIC,
    E_INVALID,
    ProtocolError,
)
from .frames import FRAME_TYPE_MESSAGE
from .goquote import go_quote
from .guid import SEQUENCE_HEX
from .names import is_valid_topic_name

FrameMpub = Callable[
    [bytes | bytearray, int, int, int, int, bytes, int, int, list[bytes]],
    tuple[int, int, int, int, int],
]
ScanFins = Callable[[bytes, int], tuple[list[bytes], int]]
#: The compiled loops, None where _speedups.c was not built.
COMPILED_FRAME_MPUB: FrameMpub | None = None
COMPILED_SCAN_FINS: ScanFins | None = None
try:
    from ._speedups import BAD_SIZE as _BAD_SIZE
    from ._speedups import NEED_BYTES as _NEED_BYTES
    from ._speedups import frame_mpub as COMPILED_FRAME_MPUB
    from ._speedups import scan_fins as COMPILED_SCAN_FINS
except ImportError:  # not built (no C compiler where it was installed): the Python loops
    _BAD_SIZE = _NEED_BYTES = -1
#: The loops parsers use: the compiled ones, unless TRIONSQ_PURE_PYTHON is set (tests swap
#: them, see `use_compiled_loops`).
_frame_mpub: FrameMpub | None = None
_scan_fins: ScanFins | None = None


def use_compiled_loops(compiled: bool) -> None:
    """Make parsers use the compiled loops (when built) or the Python ones."""
    global _frame_mpub, _scan_fins
    _frame_mpub = COMPILED_FRAME_MPUB if compiled else None
    _scan_fins = COMPILED_SCAN_FINS if compiled else None


use_compiled_loops(not os.environ.get("TRIONSQ_PURE_PYTHON"))

_INT32 = struct.Struct(">i")
_unpack_int32 = _INT32.unpack_from
_pack_frame_head = struct.Struct(">IiqH").pack  # frame size, type, timestamp, attempts
#: MPUB IDs are taken from `new_id_runs` this many at a time (never all of a declared count
#: at once: a client may declare a million messages and send none).
ID_BLOCK = 512
# Command is a NamedTuple; building it through tuple.__new__ skips the generated __new__'s
# argument handling, which is a third of the cost of parsing a FIN.
_new_command = tuple.__new__

DEFAULT_MAX_MSG_SIZE = 1024 * 1024
DEFAULT_MAX_BODY_SIZE = 5 * 1024 * 1024
DEFAULT_MAX_REQ_TIMEOUT_MS = 60 * 60 * 1000
#: nsqd reads lines with a 16 KiB bufio.Reader: a line (with its ``\n``) that does not fit is
#: a read error and the connection is closed.
MAX_LINE_LENGTH = 16 * 1024

_UINT64_MASK = (1 << 64) - 1
_INT64_SIGN = 1 << 63

CheckLine = Callable[[bytes, tuple[bytes, ...]], None]
NewIdRuns = Callable[[int], list[tuple[bytes, int, int]]]

#: Reads shorter than this, while a body is awaited, are coalesced into one bytearray: each
#: object kept costs ~50-90 B of header and malloc overhead, under 2 % from this size on.
SMALL_READ = 4096

# Kinds of body-carrying commands.
_PUB, _MPUB, _DPUB, _IDENTIFY, _AUTH = range(5)
_BODY_KIND = {
    b"PUB": _PUB,
    b"MPUB": _MPUB,
    b"DPUB": _DPUB,
    b"IDENTIFY": _IDENTIFY,
    b"AUTH": _AUTH,
}
# MPUB progress before the messages: waiting for the body size, then for the count.
_MPUB_SIZE = -2
_MPUB_COUNT = -1


def parse_uint(text: bytes) -> int | None:
    """An unsigned decimal as nsqd's ``protocol.ByteToBase10`` reads it, or None if it has a
    byte other than ``0-9``.

    Like nsqd: the empty string is 0 and the value wraps modulo 2**64 (only the last 64 digits
    matter, since 10**64 is a multiple of 2**64).
    """
    if not text:
        return 0
    if not text.isdigit():  # bytes.isdigit is ASCII-only
        return None
    return int(text[-64:]) & _UINT64_MASK


def _to_int64(value: int) -> int:
    value &= _UINT64_MASK
    return value - (1 << 64) if value & _INT64_SIGN else value


# Topic names already found valid: PUB checks its topic on every command, and a set lookup
# costs a tenth of the regex. Bounded, since names come from clients.
_valid_topics: set[bytes] = set()
_VALID_TOPICS_MAX = 4096


def _topic_check(cmd: str, topic: bytes, code_prefix: str = "") -> None:
    if topic in _valid_topics:
        return
    try:
        name = topic.decode("ascii")
    except UnicodeDecodeError:
        name = ""
    if not is_valid_topic_name(name):
        raise ProtocolError(
            E_BAD_TOPIC, f"{code_prefix}{cmd} topic name {go_quote(topic)} is not valid"
        )
    if len(_valid_topics) >= _VALID_TOPICS_MAX:
        _valid_topics.clear()
    _valid_topics.add(topic)


class CommandParser:
    """Turns a byte stream into `Command`s. See the module docstring."""

    __slots__ = (
        "_buf",
        "_chunks",
        "_chunks_len",
        "_heads",
        "_kind",
        "_mpub_bodies",
        "_mpub_left",
        "_need",
        "_pending",
        "_pos",
        "_run",
        "_runs",
        "_timestamp",
        "check_line",
        "max_body_size",
        "max_msg_size",
        "max_req_timeout_ms",
        "new_id_runs",
    )

    def __init__(
        self,
        max_msg_size: int = DEFAULT_MAX_MSG_SIZE,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        check_line: CheckLine | None = None,
        max_req_timeout_ms: int = DEFAULT_MAX_REQ_TIMEOUT_MS,
        new_id_runs: NewIdRuns | None = None,
    ) -> None:
        self.new_id_runs = new_id_runs
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.max_req_timeout_ms = max_req_timeout_ms
        self.check_line = check_line
        self._buf = b""
        self._pos = 0
        # While `_need` is set, every unconsumed byte is in `_chunks` (`_buf` is empty): the
        # tail of the read that came before, then the reads since (the short ones coalesced
        # into a bytearray), until they add up to `_need`.
        self._chunks: list[bytes | bytearray] = []
        self._chunks_len = 0
        self._need = 0
        # A command whose line is parsed and checked, waiting for its body.
        self._pending: tuple[bytes, tuple[bytes, ...]] | None = None
        self._kind = 0
        # MPUB progress: _MPUB_SIZE, _MPUB_COUNT, or the number of messages still to read.
        self._mpub_left = _MPUB_SIZE
        self._mpub_bodies: list[bytes] = []
        # Framing, for the MPUB under way: the run of IDs in use (high digits, next sequence,
        # end) and the runs taken after it, the timestamp, and for the run in use the frame
        # prefixes (header and high digits) by body size.
        self._run: tuple[bytes, int, int] = (b"", 0, 0)
        self._runs: list[tuple[bytes, int, int]] = []
        self._timestamp = 0
        self._heads: dict[int, bytes] = {}

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._need:
            chunks = self._chunks
            n = len(data)
            if n >= SMALL_READ:
                chunks.append(data)
            elif chunks and type(last := chunks[-1]) is bytearray:
                last += data
            else:
                chunks.append(bytearray(data))
            self._chunks_len += n
            if self._chunks_len < self._need:
                return
            self._buf = b"".join(chunks)
            self._chunks = []
            self._chunks_len = 0
            self._need = 0
            self._pos = 0
        elif self._pos < len(self._buf):
            self._buf = self._buf[self._pos :] + data
            self._pos = 0
        else:
            self._buf = data
            self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed by a returned command."""
        return len(self._buf) - self._pos + self._chunks_len

    def _wait_for(self, total: int) -> None:
        """Ask `feed` to accumulate chunks until `total` bytes follow `_pos`. The unconsumed
        tail moves to the chunks (the join that completes the wait copies it anyway), so the
        rest of the read is not held while a slow body arrives."""
        self._need = total
        buf = self._buf
        rest = buf[self._pos :] if self._pos else buf
        self._chunks = [rest] if rest else []
        self._chunks_len = len(rest)
        self._buf = b""
        self._pos = 0

    def take_fins(self) -> list[bytes]:
        """The IDs of the ``FIN <16-byte ID>`` commands at the head of the input, consumed,
        for the daemon to finish in one pass ([] when the next command is anything else).
        FIN is the commonest command (one per message delivered), so a run of them skips the
        general line parsing. Only lines that parse to exactly that are taken: an ID holding
        a byte that would end or split the line, or a trailing \r, is left to
        `next_command`. `check_line` sees the first FIN of the run (its verdict depends on
        the connection's state, which FIN does not change)."""
        if self._need or self._pending is not None:
            return []
        buf = self._buf
        pos = self._pos
        if _scan_fins is not None:
            ids, pos = _scan_fins(buf, pos)  # the loop below, compiled (_speedups.c)
        else:
            ids = []
            append = ids.append
            while buf.startswith(b"FIN ", pos) and buf[pos + 20 : pos + 21] == b"\n":
                message_id = buf[pos + 4 : pos + 20]
                if b" " in message_id or b"\n" in message_id or message_id[15] == 13:
                    break
                append(message_id)
                pos += 21
        if ids:
            self._pos = pos
            if self.check_line is not None:
                self.check_line(b"FIN", (ids[0],))
        return ids

    def next_command(self) -> Command | None:
        """The next complete command, or None until more bytes are fed."""
        if self._need:
            return None
        buf = self._buf
        pos = self._pos
        if self._pending is None:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if pos == len(buf):  # all consumed: let the read go
                    self._buf = b""
                    self._pos = 0
                elif len(buf) - pos >= MAX_LINE_LENGTH:
                    raise ProtocolError(E_INVALID, "command line too long")
                return None
            if nl - pos >= MAX_LINE_LENGTH:  # whatever the chunking, as nsqd's reader
                raise ProtocolError(E_INVALID, "command line too long")
            end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl  # strip a trailing \r
            parts = buf[pos:end].split(b" ")
            name = parts[0]
            params = tuple(parts[1:])
            self._pos = pos = nl + 1
            kind = _BODY_KIND.get(name)
            if kind is None:
                if self.check_line is not None:
                    self.check_line(name, params)
                return _new_command(Command, (name, params, None))
            if self.check_line is not None:
                self.check_line(name, params)
            self._pre_body_checks(kind, params)
            self._pending = (name, params)
            self._kind = kind
            if kind == _MPUB:
                self._mpub_left = _MPUB_SIZE
                self._mpub_bodies = []
        else:
            name, params = self._pending
            kind = self._kind
        if kind == _MPUB:
            return self._next_mpub(name, params)
        # A body follows: [4-byte size][size bytes].
        if len(buf) - pos < 4:
            self._wait_for(4)
            return None
        (size,) = _unpack_int32(buf, pos)
        self._check_body_size(kind, name, size)
        if len(buf) - pos - 4 < size:
            self._wait_for(4 + size)
            return None
        body = buf[pos + 4 : pos + 4 + size]
        self._pos = pos + 4 + size
        self._pending = None
        if self.new_id_runs is not None and kind != _IDENTIFY and kind != _AUTH:
            # PUB, DPUB: one message frame.
            head = _pack_frame_head(size + 30, FRAME_TYPE_MESSAGE, time.time_ns(), 0)
            high, sequence, _ = self.new_id_runs(1)[0]
            frame = head + high + SEQUENCE_HEX[sequence] + body
            return _new_command(Command, (name, params, [frame]))
        return _new_command(Command, (name, params, body))

    def _pre_body_checks(self, kind: int, params: tuple[bytes, ...]) -> None:
        """nsqd's checks made before a body is read, in its order."""
        if kind == _PUB:
            if len(params) < 1:
                raise ProtocolError(E_INVALID, "PUB insufficient number of parameters")
            _topic_check("PUB", params[0])
        elif kind == _MPUB:
            if len(params) < 1:
                raise ProtocolError(E_INVALID, "MPUB insufficient number of parameters")
            # nsqd repeats the code in this message's text (docs/protocol.md §1.3, MPUB quirk).
            _topic_check("MPUB", params[0], "E_BAD_TOPIC ")
        elif kind == _DPUB:
            if len(params) < 2:
                raise ProtocolError(E_INVALID, "DPUB insufficient number of parameters")
            _topic_check("DPUB", params[0])
            ms = parse_uint(params[1])
            if ms is None:
                text = params[1].decode("utf-8", "surrogateescape")
                raise ProtocolError(E_INVALID, f"DPUB could not parse timeout {text}")
            # Go: time.Duration(int64(ms)) * time.Millisecond, both int64 and wrapping.
            ns = _to_int64(_to_int64(ms) * 1_000_000)
            max_ms = self.max_req_timeout_ms
            if ns < 0 or ns > max_ms * 1_000_000:
                raise ProtocolError(E_INVALID, f"DPUB timeout {ms} out of range 0-{max_ms}")
        elif kind == _AUTH and params:
            raise ProtocolError(E_INVALID, "AUTH invalid number of parameters")

    def _check_body_size(self, kind: int, name: bytes, size: int) -> None:
        if kind in (_PUB, _DPUB):
            cmd = "PUB" if kind == _PUB else "DPUB"
            if size <= 0:
                raise ProtocolError(E_BAD_MESSAGE, f"{cmd} invalid message body size {size}")
            if size > self.max_msg_size:
                raise ProtocolError(
                    E_BAD_MESSAGE, f"{cmd} message too big {size} > {self.max_msg_size}"
                )
        elif kind == _MPUB:
            if size <= 0:
                raise ProtocolError(E_BAD_BODY, f"MPUB invalid body size {size}")
            if size > self.max_body_size:
                raise ProtocolError(E_BAD_BODY, f"MPUB body too big {size} > {self.max_body_size}")
        else:
            cmd = name.decode()
            if size > self.max_body_size:
                raise ProtocolError(E_BAD_BODY, f"{cmd} body too big {size} > {self.max_body_size}")
            if size <= 0:
                raise ProtocolError(E_BAD_BODY, f"{cmd} invalid body size {size}")

    def _next_mpub(self, name: bytes, params: tuple[bytes, ...]) -> Command | None:
        """Read MPUB's ``[size][count]([size][message])*`` as far as the buffer goes."""
        buf = self._buf
        pos = self._pos
        n = len(buf)
        left = self._mpub_left
        if left < 0:
            if left == _MPUB_SIZE:
                if n - pos < 4:
                    self._wait_for(4)
                    return None
                (size,) = _unpack_int32(buf, pos)
                self._check_body_size(_MPUB, name, size)
                self._pos = pos = pos + 4
                self._mpub_left = _MPUB_COUNT
            if n - pos < 4:
                self._wait_for(4)
                return None
            (left,) = _unpack_int32(buf, pos)
            if left <= 0 or left > (self.max_body_size - 4) // 5:
                raise ProtocolError(E_BAD_BODY, f"MPUB invalid message count {left}")
            self._pos = pos = pos + 4
            if self.new_id_runs is not None:
                self._timestamp = time.time_ns()
        bodies = self._mpub_bodies
        append = bodies.append
        max_msg = self.max_msg_size
        need = 0
        if self.new_id_runs is None:
            while left:
                if n - pos < 4:
                    need = 4
                    break
                (size,) = _unpack_int32(buf, pos)
                if not 0 < size <= max_msg:
                    _bad_mpub_message(len(bodies), size, max_msg)
                end = pos + 4 + size
                if end > n:
                    need = 4 + size
                    break
                append(buf[pos + 4 : end])
                pos = end
                left -= 1
        elif _frame_mpub is not None:
            # The loop below, compiled (_speedups.c): it stops when the run of IDs is used up.
            timestamp = self._timestamp
            high, sequence, run_end = self._run
            runs = self._runs
            while left:
                if sequence == run_end:
                    if not runs:
                        runs = self.new_id_runs(min(left, ID_BLOCK))
                        runs.reverse()  # taken from the end
                    high, sequence, run_end = runs.pop()
                status, pos, left, sequence, value = _frame_mpub(
                    buf, pos, left, max_msg, timestamp, high, sequence, run_end, bodies
                )
                if status == _NEED_BYTES:
                    need = value
                    break
                if status == _BAD_SIZE:
                    _bad_mpub_message(len(bodies), value, max_msg)
            self._run = (high, sequence, run_end)
            self._runs = runs
        else:
            # The same loop, each message framed as it is read (the publish hot path).
            heads = self._heads
            timestamp = self._timestamp
            high, sequence, run_end = self._run
            runs = self._runs
            digits = SEQUENCE_HEX
            while left:
                if sequence == run_end:
                    if not runs:
                        runs = self.new_id_runs(min(left, ID_BLOCK))
                        runs.reverse()  # taken from the end
                    high, sequence, run_end = runs.pop()
                    heads = {}
                if n - pos < 4:
                    need = 4
                    break
                (size,) = _unpack_int32(buf, pos)
                if not 0 < size <= max_msg:
                    _bad_mpub_message(len(bodies), size, max_msg)
                end = pos + 4 + size
                if end > n:
                    need = 4 + size
                    break
                head = heads.get(size)
                if head is None:
                    head = heads[size] = (
                        _pack_frame_head(size + 30, FRAME_TYPE_MESSAGE, timestamp, 0) + high
                    )
                append(head + digits[sequence] + buf[pos + 4 : end])
                sequence += 1
                pos = end
                left -= 1
            self._run = (high, sequence, run_end)
            self._runs = runs
            self._heads = heads
        self._pos = pos
        self._mpub_left = left
        if left:  # the loop stopped short of a message: wait for it
            self._wait_for(need)
            return None
        self._pending = None
        self._mpub_bodies = []
        return _new_command(Command, (name, params, bodies))

    def eof(self) -> None:
        """The peer's stream ended (EOF, or a read deadline passed) after `next_command`
        returned None. Raise the error nsqd sends when a command's body is cut short; a
        partial command line ends the connection without an error, so nothing is raised."""
        if self._pending is None:
            return
        cmd = self._pending[0].decode()
        kind = self._kind
        # Bytes after _pos are fewer than needed, or next_command would have used them.
        short_size = self._need == 4 or self.buffered < 4
        if kind == _MPUB:
            left = self._mpub_left
            if left == _MPUB_SIZE:
                raise ProtocolError(E_BAD_BODY, "MPUB failed to read body size")
            if left == _MPUB_COUNT:
                raise ProtocolError(E_BAD_BODY, "MPUB failed to read message count")
            if short_size:
                i = len(self._mpub_bodies)
                raise ProtocolError(E_BAD_MESSAGE, f"MPUB failed to read message({i}) body size")
            raise ProtocolError(E_BAD_MESSAGE, "MPUB failed to read message body")
        if kind in (_PUB, _DPUB):
            if short_size:
                raise ProtocolError(E_BAD_MESSAGE, f"{cmd} failed to read message body size")
            raise ProtocolError(E_BAD_MESSAGE, f"{cmd} failed to read message body")
        if short_size:
            raise ProtocolError(E_BAD_BODY, f"{cmd} failed to read body size")
        raise ProtocolError(E_BAD_BODY, f"{cmd} failed to read body")


def _bad_mpub_message(index: int, size: int, max_msg: int) -> None:
    if size <= 0:
        raise ProtocolError(E_BAD_MESSAGE, f"MPUB invalid message({index}) body size {size}")
    raise ProtocolError(E_BAD_MESSAGE, f"MPUB message too big {size} > {max_msg}")
