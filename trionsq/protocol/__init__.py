"""Sans-IO codecs of NSQ's V2 protocol: bytes in, events out. No trio, no sockets, no clocks.

The daemon, the client, the conformance suite and the fuzzers all use this package.
"""

from .commands import (
    COMMAND_NAMES,
    MAGIC_V2,
    Command,
    auth,
    cls,
    dpub,
    encode_command,
    fin,
    identify,
    mpub,
    nop,
    pub,
    rdy,
    req,
    sub,
    touch,
)
from .errors import FATAL, ProtocolError
from .frames import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    OK,
    FrameDecodeError,
    FrameDecoder,
    encode_error,
    encode_frame,
    encode_response,
)
from .guid import GUIDFactory, default_node_id
from .message import Message, decode_message, encode_message, encode_message_frame
from .names import is_ephemeral, is_valid_channel_name, is_valid_name, is_valid_topic_name
from .negotiation import IdentifyLimits, IdentifyResult, negotiate
from .parser import CommandParser, parse_uint

__all__ = [
    "CLOSE_WAIT",
    "COMMAND_NAMES",
    "FATAL",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
    "HEARTBEAT",
    "MAGIC_V2",
    "OK",
    "Command",
    "CommandParser",
    "FrameDecodeError",
    "FrameDecoder",
    "GUIDFactory",
    "IdentifyLimits",
    "IdentifyResult",
    "Message",
    "ProtocolError",
    "auth",
    "cls",
    "decode_message",
    "default_node_id",
    "dpub",
    "encode_command",
    "encode_error",
    "encode_frame",
    "encode_message",
    "encode_message_frame",
    "encode_response",
    "fin",
    "identify",
    "is_ephemeral",
    "is_valid_channel_name",
    "is_valid_name",
    "is_valid_topic_name",
    "mpub",
    "negotiate",
    "nop",
    "parse_uint",
    "pub",
    "rdy",
    "req",
    "sub",
    "touch",
]
