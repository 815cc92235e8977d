"""What the client's per-message paths need from the async library running them (an event, a
parking lot, a cancellation check), looked up once per Producer, Consumer or Connection rather
than on every call. anyio's own primitives ask sniffio which library runs at each call (under
asyncio on Python 3.11 that is a getpid system call) and wrap Trio's in one more layer; the
rest of the client uses anyio directly."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

import anyio
import sniffio
import trio

__all__ = ["Event", "Library", "ParkingLot", "running"]


class Event(Protocol):
    """What `trio.Event`, `asyncio.Event` and `anyio.Event` share."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> object: ...


class Lot(Protocol):
    """What `trio.lowlevel.ParkingLot` and `ParkingLot` share."""

    async def park(self) -> None: ...

    def unpark(self, *, count: int = 1) -> object: ...

    def unpark_all(self) -> object: ...


class ParkingLot:
    """Tasks waiting for work, woken in the order they parked (`trio.lowlevel.ParkingLot`
    for the other libraries): `park` waits until `unpark` or `unpark_all` wakes it."""

    __slots__ = ("_new_event", "_waiters")

    def __init__(self, new_event: Callable[[], Event] = anyio.Event) -> None:
        self._new_event = new_event
        self._waiters: deque[Event] = deque()

    def __len__(self) -> int:
        return len(self._waiters)

    async def park(self) -> None:
        event = self._new_event()
        self._waiters.append(event)
        try:
            await event.wait()
        finally:
            if not event.is_set():  # cancelled while parked
                self._waiters.remove(event)

    def unpark(self, *, count: int = 1) -> None:
        """Wake the `count` tasks parked longest."""
        waiters = self._waiters
        for _ in range(min(count, len(waiters))):
            waiters.popleft().set()

    def unpark_all(self) -> None:
        waiters = self._waiters
        while waiters:
            waiters.popleft().set()


class Library(NamedTuple):
    """The primitives of one async library."""

    name: str
    new_event: Callable[[], Event]
    new_parking_lot: Callable[[], Lot]
    checkpoint: Callable[[], Awaitable[None]]
    checkpoint_if_cancelled: Callable[[], Awaitable[None]]


TRIO = Library(
    "trio",
    trio.Event,
    trio.lowlevel.ParkingLot,
    trio.lowlevel.checkpoint,
    trio.lowlevel.checkpoint_if_cancelled,
)
ASYNCIO = Library(
    "asyncio",
    asyncio.Event,
    lambda: ParkingLot(asyncio.Event),
    # anyio's: they honour anyio's cancel scopes, which asyncio's own sleep(0) does not see
    anyio.lowlevel.checkpoint,
    anyio.lowlevel.checkpoint_if_cancelled,
)
#: Any other library anyio runs on: anyio's primitives throughout.
ANYIO = Library(
    "anyio",
    anyio.Event,
    ParkingLot,
    anyio.lowlevel.checkpoint,
    anyio.lowlevel.checkpoint_if_cancelled,
)


def running() -> Library:
    """The primitives of the library running the calling task."""
    name = sniffio.current_async_library()
    return TRIO if name == "trio" else ASYNCIO if name == "asyncio" else ANYIO
