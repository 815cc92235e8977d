"""TLS, and what each failure raises. ``NSQD_TCP_ADDRESS=...`` is an nsqd started with
``--tls-cert``/``--tls-key``; ``NSQ_CA_FILE`` is the CA that signed its certificate."""

import asyncio
import os

from trionsq.client import (
    ClientError,
    ConnectionClosedError,
    NotConnectedError,
    NSQError,
    Producer,
    TLSError,
)

NSQD = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")
CA_FILE = os.environ.get("NSQ_CA_FILE", "ca.pem")


async def main() -> None:
    # TLS: nsqd offers it after IDENTIFY; the client checks nsqd's certificate with CA_FILE
    async with Producer(NSQD, tls_v1=True, tls_cafile=CA_FILE, snappy=True) as producer:
        await producer.pub("secure", b"over TLS and snappy")
        try:
            await producer.pub("not a valid topic!", b"x")
        except NSQError as error:  # an error frame from nsqd: error.code is NSQ's
            print("refused:", error.code)

    try:  # without the CA, nsqd's certificate is not trusted
        async with Producer(NSQD, tls_v1=True):
            pass
    except TLSError as error:
        print("TLS error:", "CERTIFICATE_VERIFY_FAILED" in str(error))

    try:  # nothing listens there
        async with Producer("127.0.0.1:1"):
            pass
    except NotConnectedError as error:
        print("not connected:", error)  # Go's words: dial tcp 127.0.0.1:1: connect: ...

    # Every error is a ClientError; ConnectionClosedError means the connection ended with
    # the publish outstanding: it may or may not have been published.
    assert issubclass(ConnectionClosedError, ClientError)


asyncio.run(main())
