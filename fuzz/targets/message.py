"""Server frames and messages: trionsq.protocol.frames.FrameDecoder fed arbitrary bytes in
arbitrary splits, and trionsq.protocol.message's decoder and frame helpers.

What must hold:
* only `FrameDecodeError` escapes the decoder; frames do not depend on the split;
* the frames re-encoded with `encode_frame` are exactly the bytes consumed;
* `buffered` never exceeds the bytes fed (no preallocation from the declared frame size);
* `decode_message` raises only ValueError (payload under 26 bytes); a decoded message
  re-encodes (`encode_message`, `encode_message_frame`) to the same bytes, and the framed_*
  accessors and `with_attempts` agree with the decoded fields.
"""

from __future__ import annotations

from trionsq.protocol import frames as f
from trionsq.protocol import message as m

from ..common import check, split_input

MAX_FRAME = 1 << 20


def _decode(chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], bool, int]:
    dec = f.FrameDecoder(max_frame_size=MAX_FRAME)
    out: list[tuple[int, bytes]] = []
    fed = 0
    try:
        for chunk in chunks:
            dec.feed(chunk)
            fed += len(chunk)
            while (frame := dec.next_frame()) is not None:
                out.append(frame)
            check(dec.buffered <= fed, "buffered more than fed")
    except f.FrameDecodeError:
        return out, True, fed
    return out, False, dec.buffered


def test_one_input(data: bytes) -> None:
    _, chunks = split_input(data)
    whole = b"".join(chunks)
    frames, failed, left = _decode(chunks)
    frames_whole, failed_whole, _ = _decode([whole] if whole else [])
    check((frames, failed) == (frames_whole, failed_whole), "frames depend on the split")
    consumed = b"".join(f.encode_frame(t, d) for t, d in frames)
    check(whole.startswith(consumed), "re-encoded frames differ from the input")
    if not failed:
        check(len(consumed) + left == len(whole), "bytes lost")
    for frame_type, payload in [*frames, (f.FRAME_TYPE_MESSAGE, whole)]:
        if frame_type != f.FRAME_TYPE_MESSAGE:
            continue
        try:
            msg = m.decode_message(payload)
        except ValueError:
            check(len(payload) < m.MESSAGE_HEADER_SIZE, "decode_message refused a long payload")
            continue
        check(m.encode_message(msg.id, msg.timestamp, msg.attempts, msg.body) == payload, "enc")
        framed = m.encode_message_frame(msg.id, msg.timestamp, msg.attempts, msg.body)
        check(framed == f.encode_frame(f.FRAME_TYPE_MESSAGE, payload), "frame encoding")
        check(m.framed_id(framed) == msg.id, "framed_id")
        check(m.framed_attempts(framed) == msg.attempts, "framed_attempts")
        check(m.framed_timestamp(framed) == msg.timestamp, "framed_timestamp")
        check(m.framed_body(framed) == msg.body, "framed_body")
        bumped = m.with_attempts(framed, msg.attempts + 1)
        check(m.framed_attempts(bumped) == (msg.attempts + 1) & 0xFFFF, "with_attempts")
        check(len(bumped) == len(framed), "with_attempts length")


def seeds() -> list[bytes]:
    msg = m.encode_message_frame(b"0123456789abcdef", 1_700_000_000_000_000_000, 1, b"body")
    stream = b"".join(
        [f.OK_FRAME, f.HEARTBEAT_FRAME, msg, f.encode_error(b"E_INVALID bad"), f.CLOSE_WAIT_FRAME]
    )
    return [
        b"\x00" + stream,
        b"\x01" + stream,
        b"\x09" + stream,
        b"\x00" + m.encode_message(b"0123456789abcdef", -1, 65535, b""),
        b"\x00\x7f\xff\xff\xff\x00\x00\x00\x02",
    ]
