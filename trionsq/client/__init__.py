"""trionsq.client: a Trio-native NSQ client library (V2 protocol).

* `Producer` publishes (PUB/MPUB/DPUB) with a pipeline and MPUB coalescing;
* `Consumer` subscribes on nsqds given or found via nsqlookupd, with go-nsq's RDY,
  backoff and max_attempts conventions, handlers or ``async for``;
* `Connection` is one nsqd connection (IDENTIFY, TLS/snappy/deflate, AUTH).

Every background task runs in the nursery that the object's ``async with`` opens.
"""

from .connection import Connection, Reply
from .consumer import Consumer
from .errors import ClientError, ConnectionClosedError, NotConnectedError, NSQError
from .lookup import lookup_producers, query_lookupds
from .message import Message
from .options import ConnectionOptions
from .producer import Producer

__all__ = [
    "ClientError",
    "Connection",
    "ConnectionClosedError",
    "ConnectionOptions",
    "Consumer",
    "Message",
    "NSQError",
    "NotConnectedError",
    "Producer",
    "Reply",
    "lookup_producers",
    "query_lookupds",
]
