"""trionsq.client: an NSQ client library (V2 protocol) for asyncio and Trio applications alike
(it runs on anyio; the daemons stay on Trio alone).

* `Producer` publishes (PUB/MPUB/DPUB) with a pipeline and MPUB coalescing;
* `Consumer` subscribes on nsqds given or found via nsqlookupd, with go-nsq's RDY,
  backoff and max_attempts conventions, handlers or ``async for``;
* `Connection` is one nsqd connection (IDENTIFY, TLS/snappy/deflate, AUTH);
* `SyncProducer` publishes from synchronous code (scripts, WSGI apps, Spark tasks).

docs/client.md is the guide, with examples the tests run.

Every background task runs in the task group (nursery) that the object's ``async with``
opens. Errors are `ClientError`s (see `trionsq.client.errors`): `NotConnectedError` (refused,
reset, timed out; `TLSError` for a failed TLS upgrade), `ProtocolError` (a bad IDENTIFY
reply), `NSQError` (an ``E_*`` error frame) and `ConnectionClosedError`, from ``async with``
as from each call.
"""

from .connection import Connection, Reply
from .consumer import Consumer
from .errors import (
    ClientError,
    ConnectionClosedError,
    NotConnectedError,
    NSQError,
    ProtocolError,
    TLSError,
)
from .lookup import lookup_producers, query_lookupds
from .message import Message
from .options import ConnectionOptions
from .producer import Producer
from .sync_producer import PublishTimeoutError, SyncProducer

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
    "ProtocolError",
    "PublishTimeoutError",
    "Reply",
    "SyncProducer",
    "TLSError",
    "lookup_producers",
    "query_lookupds",
]
