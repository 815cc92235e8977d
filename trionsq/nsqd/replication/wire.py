"""The replication connection between members (docs/replication.md section 6): the IDENTIFY
key that turns a V2 connection into one (with its HMAC), and the frames that follow it,
``[4-byte size][1-byte type][2-byte header length][JSON header][binary blob]``.

The header is JSON, except for the stream's own frames (MSGS and ACK, one per publish batch):
``[8-byte epoch][8-byte total][topic]``, which cost a tenth of JSON's time to encode and read.

The dialler sends requests on its connection; the answers come back on it. This module owns
only the encoding; what the frames mean is `node.py`'s.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import struct
from typing import Any

import trio

log = logging.getLogger("trionsq.nsqd")

#: The replication protocol's version, in the IDENTIFY key: a member refuses a peer of another
#: (members are upgraded together). 3: the log records that MSGS, BODIES and PUB_FORWARD
#: carry end in a CRC-32C (log.py).
VERSION = 3
#: The largest frame accepted (a summary of a large log or a batch of catch-up messages).
MAX_FRAME = 256 * 1024 * 1024

# Requests (dialler -> peer) and their answers (peer -> dialler).
HEARTBEAT, HEARTBEAT_ACK = 1, 2
MSGS, ACK = 3, 4
FINS = 5
CHANNEL = 6
PREVOTE, PREVOTE_REPLY = 7, 8
PREPARE, PROMISE = 9, 10
REFUSE = 11
SYNC, SUMMARY = 12, 13
WANT, BODIES = 14, 15
#: The dialler's first frame: its proof over the answerer's challenge (`proof`).
PROOF = 16
# Admin actions (replication_admin.py): a topic's pause/unpause/empty/delete and the state a
# joining member gets (TOPIC, one-way, in order with the stream); a request answered once
# every frame sent before it is applied and on disk (BARRIER); an HTTP admin action a replica
# forwards to the primary (FORWARD); the answer about a topic deleted in a later epoch than
# the asker's copy (DELETED).
TOPIC = 17
BARRIER, BARRIER_ACK = 18, 19
FORWARD, FORWARD_REPLY = 20, 21
DELETED = 22
#: Which of these IDs (held by the asker, not by the peer) did the peer's compaction drop as
#: finished everywhere: a merge learns what the peer finished and forgot.
ASK_DROPPED, DROPPED = 23, 24
#: A member whose log lost records to corruption asks each peer for its state (answered with
#: a SUMMARY, without the side effects of a SYNC) and merges it before it may vote or stand.
ASK_SUMMARY = 25
#: Messages published to a replica, forwarded to the primary, and its answer
#: (forward.py).
PUB_FORWARD, PUB_FORWARD_REPLY = 28, 29
NAMES = {
    value: name
    for name, value in globals().items()
    if name.isupper() and isinstance(value, int) and 0 < value < 32
}

_SIZE = struct.Struct(">I")
_HEAD = struct.Struct(">IBH")
_STREAM = struct.Struct(">QQ")
#: Frames with the binary stream header (`encode_stream`).
STREAM_KINDS = frozenset({MSGS, ACK})


class WireError(Exception):
    """A peer broke the replication protocol (the connection closes)."""


def encode(kind: int, header: dict[str, Any], blob: bytes = b"") -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    return _HEAD.pack(1 + 2 + len(raw) + len(blob), kind, len(raw)) + raw + blob


def encode_stream(kind: int, topic: str, epoch: int, total: int, blob: bytes = b"") -> bytes:
    """MSGS or ACK: the header ``{"topic", "epoch", "total"}`` in binary."""
    raw = _STREAM.pack(epoch, total) + topic.encode()
    return _HEAD.pack(1 + 2 + len(raw) + len(blob), kind, len(raw)) + raw + blob


def _stream_header(raw: bytes) -> dict[str, Any]:
    if len(raw) < _STREAM.size:
        raise WireError("bad stream header")
    epoch, total = _STREAM.unpack_from(raw)
    try:
        topic = raw[_STREAM.size :].decode()
    except UnicodeDecodeError:
        raise WireError("bad stream header") from None
    return {"topic": topic, "epoch": epoch, "total": total}


class FrameReader:
    """Frames from a stream: `await next()` -> (type, header, blob)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def _fill(self, count: int) -> None:
        while len(self.buffer) < count:
            chunk = await self.stream.receive_some(max(65536, count - len(self.buffer)))
            if not chunk:
                raise trio.BrokenResourceError("connection closed by peer")
            self.buffer += chunk

    def ready(self) -> bool:
        """A whole frame is buffered."""
        if len(self.buffer) < 4:
            return False
        size: int = _SIZE.unpack_from(self.buffer, 0)[0]
        return len(self.buffer) >= 4 + size

    async def next(self) -> tuple[int, dict[str, Any], bytes]:
        await self._fill(4)
        size = _SIZE.unpack_from(self.buffer, 0)[0]
        if size < 3 or size > MAX_FRAME:
            raise WireError(f"bad frame size {size}")
        await self._fill(4 + size)
        kind = self.buffer[4]
        header_len = struct.unpack_from(">H", self.buffer, 5)[0]
        if 3 + header_len > size:
            raise WireError("bad header length")
        raw = bytes(self.buffer[7 : 7 + header_len])
        if kind in STREAM_KINDS:
            header = _stream_header(raw)
        else:
            try:
                header = json.loads(raw)
            except ValueError as err:
                raise WireError(f"bad header - {err}") from None
            if not isinstance(header, dict):
                raise WireError("bad header")
        blob = bytes(self.buffer[7 + header_len : 4 + size])
        del self.buffer[: 4 + size]
        return kind, header, blob


# -- the handshake ----------------------------------------------------------------------------
#
# The dialler's IDENTIFY carries its node ID, a nonce and an HMAC (of the shared secret) over
# them; the answerer checks it and replies with its own node ID, an HMAC over the dialler's
# nonce (the dialler knows it talks to a member) and a challenge of its own. The dialler's
# first frame, PROOF, is an HMAC over both nonces: a recorded IDENTIFY replayed by someone
# without the secret cannot answer a new challenge, so the answerer serves nothing before it.


def _mac(secret: str, text: str) -> str:
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def identify_key(secret: str, node_id: int) -> dict[str, Any]:
    """The ``replication`` key of the dialler's IDENTIFY."""
    nonce = secrets.token_hex(16)
    return {
        "version": VERSION,
        "node_id": node_id,
        "nonce": nonce,
        "hmac": _mac(secret, f"dial:{node_id}:{nonce}"),
    }


class Inbound:
    """What the answerer keeps of a dialler between its IDENTIFY and its PROOF."""

    __slots__ = ("challenge", "nonce", "peer")

    def __init__(self, peer: int, nonce: str, challenge: str) -> None:
        self.peer = peer
        self.nonce = nonce
        self.challenge = challenge

    def check_proof(self, secret: str, kind: int, header: dict[str, Any]) -> None:
        """The dialler's first frame must be its PROOF. Raises WireError."""
        expected = _mac(secret, f"proof:{self.peer}:{self.nonce}:{self.challenge}")
        if kind != PROOF or not hmac.compare_digest(str(header.get("hmac")), expected):
            raise WireError("replication peer failed the challenge")


#: (node ID, version) of the peers of another version met (each logged once).
_other_versions: set[tuple[Any, Any]] = set()


def version_mismatch(node: Any, version: Any) -> str:
    """Why a peer of another replication version is refused (the one line logged)."""
    return (
        f"unsupported replication version {version} (node {node}; this node speaks version "
        f"{VERSION}): the members of a replica set must be upgraded together"
    )


def refusal(text: str) -> str:
    """What a dialler logs of a peer's IDENTIFY error (an older trionsq says only
    "unsupported replication version")."""
    if (
        "unsupported replication version" in text
        and f"this node speaks version {VERSION}" not in text
    ):
        text += f" (this node speaks version {VERSION}: members must be upgraded together)"
    return f"IDENTIFY refused: {text}"


def check_identify_key(secret: str, node_id: int, raw: Any) -> tuple[Inbound, dict[str, Any]]:
    """Check a dialler's key; returns what to keep of it and the key of the reply. Raises
    WireError (the connection is refused with E_IDENTIFY_FAILED)."""
    if not isinstance(raw, dict):
        raise WireError("bad replication key")
    if raw.get("version") != VERSION:
        why = version_mismatch(raw.get("node_id"), raw.get("version"))
        key = (raw.get("node_id"), raw.get("version"))
        if key not in _other_versions and len(_other_versions) < 64:  # retried every 2 s
            _other_versions.add(key)
            log.error("REPLICATION: refusing a peer - %s", why)
        raise WireError(why)
    peer = raw.get("node_id")
    nonce = raw.get("nonce")
    if not isinstance(peer, int) or not isinstance(nonce, str):
        raise WireError("bad replication key")
    if not hmac.compare_digest(str(raw.get("hmac")), _mac(secret, f"dial:{peer}:{nonce}")):
        raise WireError("replication secret mismatch")
    if peer == node_id:
        raise WireError(f"peer has this node's --node-id {node_id}")
    challenge = secrets.token_hex(16)
    reply = {
        "version": VERSION,
        "node_id": node_id,
        "hmac": _mac(secret, f"answer:{node_id}:{nonce}"),
        "challenge": challenge,
    }
    return Inbound(peer, nonce, challenge), reply


def check_reply_key(secret: str, sent: dict[str, Any], raw: Any, node_id: int) -> tuple[int, bytes]:
    """Check the IDENTIFY reply's key (absent: the peer is not a trionsq member, e.g. Go
    nsqd); returns the peer's node ID and the PROOF frame to send first."""
    if not isinstance(raw, dict):
        raise WireError("the peer does not replicate (no replication key in its IDENTIFY reply)")
    if raw.get("version") != VERSION:
        raise WireError(version_mismatch(raw.get("node_id"), raw.get("version")))
    peer = raw.get("node_id")
    challenge = raw.get("challenge")
    if not isinstance(peer, int) or not isinstance(challenge, str):
        raise WireError("bad replication reply")
    expected = _mac(secret, f"answer:{peer}:{sent['nonce']}")
    if not hmac.compare_digest(str(raw.get("hmac")), expected):
        raise WireError("replication secret mismatch")
    if peer == node_id:
        raise WireError(f"peer has this node's --node-id {node_id}")
    proof = _mac(secret, f"proof:{sent['node_id']}:{sent['nonce']}:{challenge}")
    return peer, encode(PROOF, {"hmac": proof})
