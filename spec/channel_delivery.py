"""The spec of message delivery on a topic's channels: PUB, delivery to ready subscribers, FIN,
REQ with and without delay, TOUCH, timeouts, disconnects, RDY changes and daemon restarts
(graceful and crash), with a memory or a durable queue.

Names follow the implementation (trionsq/nsqd/channel.py, client_v2.py): a channel's `queued`
messages are its `memory` deque plus its `backend`; `deferred` is its deferred heap; `orphans`
are the in-flight tables of subscribers that went away; each client has its `in_flight` table
and `rdy`. Actions are named after the methods that perform them: `publish`
(Topic.put_bodies), `subscribe` (SUB), `rdy`, `deliver` (Channel.dispatch → ClientV2.deliver),
`finish`, `requeue`, `touch` (FIN/REQ/TOUCH → Channel.finish/requeue/touch), `expire` and
`deferred_due` (the queue scan: Channel.process_due), `disconnect` (Channel.remove_client),
`restart` (the ordered shutdown, Channel.close, and a start) and `crash` (kill -9 and a start).

Time is abstract: an in-flight message may time out at any moment (the consumer may be slow),
a deferred message becomes due eventually. TOUCH therefore changes nothing in this model but
its answer; the timing itself (msg_timeout, the TOUCH cap) is tested on a mock clock in
tests/integration/test_nsqd_daemon.py.

The consumer is correct: it reconnects, keeps RDY above zero and finishes what it receives
(fair actions). Everything adversarial (timeouts of live deliveries, REQ, RDY 0, disconnects,
restarts, crashes) spends a budget, so that liveness is at-least-once for a correct consumer.

Dead-lettering (--max-attempts, beyond NSQ; trionsq/nsqd/dead_letter.py): with `max_attempts`
N > 0, a queued message already delivered N times is never delivered again: `dead_letter`
(Channel._take → Channel._dead_letter) moves it to the dead-letter topic, where it is `dead`:
acknowledged there, so at-least-once holds with "finished or dead-lettered". The dead-letter
topic may refuse it (exiting, disk error: `dead_letter ... refused`, budgeted): it then stays
queued in the channel. The dead-letter topic is a topic like any: a crash of the memory queue
loses what it holds, the durable queue keeps it.

Message TTL (--message-ttl, beyond NSQ): with `ttl`, a published message may grow `old` at
any moment (`age`, budgeted: time is abstract). An old message is never delivered again:
`expire_ttl` (Channel._take → Screen.split) drops it (`expired`, a deliberate end like
`finished`) or, when the channel dead-letters, moves it to the dead-letter topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from .core import Action, Invariant, Liveness, Mutant, Spec, StepInvariant

MEMORY = "memory"
"""Queues in memory: a graceful shutdown writes them to disk, a crash loses them."""
DURABLE = "durable"
"""--mem-queue-size=0 --sync-every=1: every acknowledged message survives a crash."""

FAULTS = {
    "stale_fin_accepted": "FIN succeeds for a message no longer in flight to the client",
    "in_flight_dropped_on_disconnect": "a disconnecting client's in-flight messages are dropped",
    "rdy_not_enforced": "delivery ignores how many messages are already in flight",
    "attempts_reset_on_requeue": "REQ puts the message back with its attempts reset",
    "expired_stays_in_flight": "a timed-out message is requeued but left in the in-flight table",
    "restart_loses_in_flight": "the ordered shutdown forgets in-flight messages",
    "crash_loses_in_flight": (
        "a crash loses in-flight messages of the durable queue (go-diskqueue's read position "
        "is synced past them)"
    ),
    "orphans_never_expire": "the queue scan ignores the in-flight messages of departed clients",
    "delivered_beyond_max_attempts": "delivery ignores --max-attempts (no dead-lettering first)",
    "dead_letter_dropped": "a message past --max-attempts is dropped instead of moved",
    "refused_dead_letter_dropped": (
        "a message the dead-letter topic refuses is dropped instead of kept in the channel"
    ),
    "dead_letter_never_moved": (
        "a message past --max-attempts is held back from delivery but never moved (stuck)"
    ),
    "expired_delivered": "delivery ignores --message-ttl (an old message is delivered)",
    "expired_dropped_when_dead_lettering": (
        "a message past its TTL is dropped instead of moved on a channel that dead-letters"
    ),
}


@dataclass(frozen=True)
class Bounds:
    messages: int = 2
    clients: int = 2
    channels: int = 1
    max_rdy: int = 2
    mode: str = MEMORY
    timeouts: int = 1
    requeues: int = 1
    rdy_zeros: int = 1
    disconnects: int = 1
    restarts: int = 1
    crashes: int = 1
    #: --max-attempts (0: off, as NSQ) and how often the dead-letter topic may refuse.
    max_attempts: int = 0
    refusals: int = 0
    #: --message-ttl on, and how many messages may grow old.
    ttl: bool = False
    ages: int = 0
    faults: frozenset[str] = field(default_factory=frozenset)


class ChannelState(NamedTuple):
    queued: frozenset[int]
    deferred: frozenset[int]
    orphans: frozenset[int]
    finished: frozenset[int]
    lost: frozenset[int]
    attempts: tuple[int, ...]  # per published message: attempts of its latest delivery
    dead: frozenset[int] = frozenset()  # moved to the dead-letter topic (acknowledged there)
    expired: frozenset[int] = frozenset()  # dropped past its TTL (deliberately)


class ClientState(NamedTuple):
    connected: bool
    rdy: int
    in_flight: frozenset[int]  # the daemon's in-flight table for this client
    holding: frozenset[int]  # the consumer's view: received, not yet FIN'd or REQ'd


class Budget(NamedTuple):
    timeouts: int
    requeues: int
    rdy_zeros: int
    disconnects: int
    restarts: int
    crashes: int
    refusals: int = 0
    ages: int = 0


class DeliveryState(NamedTuple):
    published: int
    channels: tuple[ChannelState, ...]
    clients: tuple[ClientState, ...]
    budget: Budget
    old: frozenset[int] = frozenset()  # past their TTL (the TTL counts from the publish)


# -- helpers --------------------------------------------------------------------------------


def channel_of(bounds: Bounds, client: int) -> int:
    """Subscribers are spread over the channels: client c subscribes to channel c % channels."""
    return client % bounds.channels


def _set_channel(state: DeliveryState, index: int, channel: ChannelState) -> DeliveryState:
    channels = list(state.channels)
    channels[index] = channel
    return state._replace(channels=tuple(channels))


def _set_client(state: DeliveryState, index: int, client: ClientState) -> DeliveryState:
    clients = list(state.clients)
    clients[index] = client
    return state._replace(clients=tuple(clients))


def _spend(state: DeliveryState, name: str) -> DeliveryState:
    budget = state.budget._replace(**{name: getattr(state.budget, name) - 1})
    return state._replace(budget=budget)


def _with_attempts(channel: ChannelState, message: int, attempts: int) -> ChannelState:
    values = list(channel.attempts)
    values[message] = attempts
    return channel._replace(attempts=tuple(values))


def _unfinished_in_flight(state: DeliveryState, channel: int, bounds: Bounds) -> frozenset[int]:
    held: frozenset[int] = frozenset()
    for index, client in enumerate(state.clients):
        if channel_of(bounds, index) == channel:
            held |= client.in_flight
    return held


def initial_state(bounds: Bounds) -> DeliveryState:
    empty: frozenset[int] = frozenset()
    channel = ChannelState(empty, empty, empty, empty, empty, ())
    client = ClientState(False, 0, empty, empty)
    budget = Budget(
        bounds.timeouts,
        bounds.requeues,
        bounds.rdy_zeros,
        bounds.disconnects,
        bounds.restarts,
        bounds.crashes,
        bounds.refusals,
        bounds.ages,
    )
    return DeliveryState(0, (channel,) * bounds.channels, (client,) * bounds.clients, budget)


# -- actions --------------------------------------------------------------------------------


def publish(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """PUB answered OK: the message is acknowledged and queued on every channel."""
    message = state.published
    if message >= bounds.messages:
        return
    channels = tuple(
        ch._replace(queued=ch.queued | {message}, attempts=(*ch.attempts, 0))
        for ch in state.channels
    )
    yield f"publish(m{message})", state._replace(published=message + 1, channels=channels)


def subscribe(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """A (new) connection of consumer c: IDENTIFY, SUB; RDY starts at 0."""
    for index, client in enumerate(state.clients):
        if not client.connected:
            yield f"subscribe(c{index})", _set_client(state, index, client._replace(connected=True))


def rdy(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """RDY n ≥ 1 (the correct consumer opens its window)."""
    for index, client in enumerate(state.clients):
        if not client.connected:
            continue
        for count in range(1, bounds.max_rdy + 1):
            if count != client.rdy:
                after = _set_client(state, index, client._replace(rdy=count))
                yield f"rdy(c{index}, {count})", after


def rdy_zero(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """RDY 0: the consumer pauses (budgeted)."""
    if not state.budget.rdy_zeros:
        return
    for index, client in enumerate(state.clients):
        if client.connected and client.rdy:
            after = _set_client(_spend(state, "rdy_zeros"), index, client._replace(rdy=0))
            yield f"rdy(c{index}, 0)", after


def deliver(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """The channel sends a queued message to a subscriber with room in its RDY window."""
    for index, client in enumerate(state.clients):
        if not client.connected:
            continue
        window_open = (
            client.rdy > 0
            if "rdy_not_enforced" in bounds.faults
            else len(client.in_flight) < client.rdy
        )
        if not window_open:
            continue
        ch_index = channel_of(bounds, index)
        channel = state.channels[ch_index]
        for message in sorted(channel.queued):
            if _past_max_attempts(bounds, channel, message) and (
                "delivered_beyond_max_attempts" not in bounds.faults
            ):
                continue  # dead_letter's
            if message in state.old and "expired_delivered" not in bounds.faults:
                continue  # expire_ttl's
            after_channel = _with_attempts(
                channel._replace(queued=channel.queued - {message}),
                message,
                channel.attempts[message] + 1,
            )
            after_client = client._replace(
                in_flight=client.in_flight | {message}, holding=client.holding | {message}
            )
            after = _set_client(_set_channel(state, ch_index, after_channel), index, after_client)
            yield f"deliver(c{index}, m{message})", after


def _past_max_attempts(bounds: Bounds, channel: ChannelState, message: int) -> bool:
    return bool(bounds.max_attempts) and channel.attempts[message] >= bounds.max_attempts


def dead_letter(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """A queued message already delivered max_attempts times, about to be delivered again, is
    moved to the dead-letter topic instead (same ID, body, attempts)."""
    if "dead_letter_never_moved" in bounds.faults:
        return
    for ch_index, channel in enumerate(state.channels):
        for message in sorted(channel.queued):
            if not _past_max_attempts(bounds, channel, message):
                continue
            if "dead_letter_dropped" in bounds.faults:
                after = channel._replace(
                    queued=channel.queued - {message}, lost=channel.lost | {message}
                )
            else:
                after = channel._replace(
                    queued=channel.queued - {message}, dead=channel.dead | {message}
                )
            yield f"dead_letter(ch{ch_index}, m{message})", _set_channel(state, ch_index, after)


def dead_letter_refused(
    bounds: Bounds, state: DeliveryState
) -> Iterator[tuple[str, DeliveryState]]:
    """The dead-letter topic refuses the message (exiting, disk error; budgeted): it stays
    queued in the channel, and is neither delivered nor lost."""
    if not state.budget.refusals:
        return
    spent = _spend(state, "refusals")
    for ch_index, channel in enumerate(state.channels):
        for message in sorted(channel.queued):
            if not _past_max_attempts(bounds, channel, message):
                continue
            after = channel
            if "refused_dead_letter_dropped" in bounds.faults:
                after = channel._replace(
                    queued=channel.queued - {message}, lost=channel.lost | {message}
                )
            yield (
                f"dead_letter(ch{ch_index}, m{message}) refused",
                _set_channel(spent, ch_index, after),
            )


def age(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """Time passes: a published message becomes older than its TTL (budgeted)."""
    if not bounds.ttl or not state.budget.ages:
        return
    spent = _spend(state, "ages")
    for message in range(state.published):
        if message not in state.old:
            yield f"age(m{message})", spent._replace(old=state.old | {message})


def expire_ttl(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """A queued message past its TTL, about to be delivered, is dropped, or moved to the
    dead-letter topic when the channel dead-letters (a refusal keeps it queued, as for
    dead_letter)."""
    for ch_index, channel in enumerate(state.channels):
        for message in sorted(channel.queued & state.old):
            if _past_max_attempts(bounds, channel, message):
                continue  # dead_letter's (both apply: the move is the same)
            queued = channel.queued - {message}
            if bounds.max_attempts and "expired_dropped_when_dead_lettering" not in bounds.faults:
                after = channel._replace(queued=queued, dead=channel.dead | {message})
            else:
                after = channel._replace(queued=queued, expired=channel.expired | {message})
            label = f"expire_ttl(ch{ch_index}, m{message})"
            yield label, _set_channel(state, ch_index, after)


def finish(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """FIN of a message the consumer holds: done if it is still in flight to this client,
    else E_FIN_FAILED and nothing changes (the consumer forgets it)."""
    for index, client in enumerate(state.clients):
        for message in sorted(client.holding):
            dropped = client._replace(holding=client.holding - {message})
            ch_index = channel_of(bounds, index)
            channel = state.channels[ch_index]
            if message in client.in_flight:
                dropped = dropped._replace(in_flight=client.in_flight - {message})
            elif "stale_fin_accepted" in bounds.faults and message not in channel.finished:
                channel = channel._replace(
                    queued=channel.queued - {message},
                    deferred=channel.deferred - {message},
                    orphans=channel.orphans - {message},
                )
            else:
                yield (
                    f"finish(c{index}, m{message}) E_FIN_FAILED",
                    _set_client(state, index, dropped),
                )
                continue
            channel = channel._replace(finished=channel.finished | {message})
            after = _set_client(_set_channel(state, ch_index, channel), index, dropped)
            yield f"finish(c{index}, m{message})", after


def requeue(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """REQ with no delay (back to the queue) or with one (deferred) (budgeted)."""
    if not state.budget.requeues:
        return
    spent = _spend(state, "requeues")
    for index, client in enumerate(state.clients):
        for message in sorted(client.holding):
            dropped = client._replace(holding=client.holding - {message})
            if message not in client.in_flight:
                yield (
                    f"requeue(c{index}, m{message}) E_REQ_FAILED",
                    _set_client(spent, index, dropped),
                )
                continue
            dropped = dropped._replace(in_flight=client.in_flight - {message})
            ch_index = channel_of(bounds, index)
            channel = state.channels[ch_index]
            if "attempts_reset_on_requeue" in bounds.faults:
                channel = _with_attempts(channel, message, 0)
            now = channel._replace(queued=channel.queued | {message})
            later = channel._replace(deferred=channel.deferred | {message})
            for label, after_channel in (("0", now), ("delay", later)):
                after = _set_client(_set_channel(spent, ch_index, after_channel), index, dropped)
                yield f"requeue(c{index}, m{message}, {label})", after


def touch(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """TOUCH: resets the message's timeout (time is abstract here: only the answer shows)."""
    for index, client in enumerate(state.clients):
        for message in sorted(client.holding):
            if message in client.in_flight:
                yield f"touch(c{index}, m{message})", state
            else:
                dropped = client._replace(holding=client.holding - {message})
                yield (
                    f"touch(c{index}, m{message}) E_TOUCH_FAILED",
                    _set_client(state, index, dropped),
                )


def expire(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """A live client's delivery times out (budgeted): back to the queue. The consumer still
    holds it and will find its FIN refused."""
    if not state.budget.timeouts:
        return
    spent = _spend(state, "timeouts")
    keep = "expired_stays_in_flight" in bounds.faults
    for index, client in enumerate(state.clients):
        ch_index = channel_of(bounds, index)
        channel = state.channels[ch_index]
        for message in sorted(client.in_flight):
            after_client = (
                client if keep else client._replace(in_flight=client.in_flight - {message})
            )
            after_channel = channel._replace(queued=channel.queued | {message})
            after = _set_client(_set_channel(spent, ch_index, after_channel), index, after_client)
            yield f"expire(c{index}, m{message})", after


def expire_orphan(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """The queue scan times out a message in flight to a departed client (always, eventually)."""
    if "orphans_never_expire" not in bounds.faults:
        yield from _queue_each(state, "orphans", "expire(orphan, ch{ch}, m{m})")


def deferred_due(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """A deferred message's time comes: it is queued."""
    yield from _queue_each(state, "deferred", "deferred_due(ch{ch}, m{m})")


def _queue_each(
    state: DeliveryState, source: str, label: str
) -> Iterator[tuple[str, DeliveryState]]:
    """For each message in a channel's `source` set: the state with it moved to `queued`."""
    for ch_index, channel in enumerate(state.channels):
        held: frozenset[int] = getattr(channel, source)
        for message in sorted(held):
            taken: dict[str, Any] = {source: held - {message}}
            after = channel._replace(**taken, queued=channel.queued | {message})
            yield label.format(ch=ch_index, m=message), _set_channel(state, ch_index, after)


def disconnect(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """The connection closes: as in NSQ, its in-flight messages stay in flight (orphaned) until
    they time out; they are not requeued at once."""
    if not state.budget.disconnects:
        return
    spent = _spend(state, "disconnects")
    for index, client in enumerate(state.clients):
        if not client.connected:
            continue
        ch_index = channel_of(bounds, index)
        channel = state.channels[ch_index]
        if "in_flight_dropped_on_disconnect" in bounds.faults:
            channel = channel._replace(lost=channel.lost | client.in_flight)
        else:
            channel = channel._replace(orphans=channel.orphans | client.in_flight)
        gone = ClientState(False, 0, frozenset(), frozenset())
        yield (
            f"disconnect(c{index})",
            _set_client(_set_channel(spent, ch_index, channel), index, gone),
        )


def restart(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """The ordered shutdown and a start: every queued, in-flight and deferred message is
    written to disk and comes back (deferred ones still deferred); all connections close."""
    if not state.budget.restarts:
        return
    yield "restart", _stop(bounds, _spend(state, "restarts"), crash=False)


def crash(bounds: Bounds, state: DeliveryState) -> Iterator[tuple[str, DeliveryState]]:
    """kill -9 and a start: the memory queue loses everything unfinished; the durable queue
    keeps everything acknowledged (at-least-once: in-flight messages come back queued)."""
    if not state.budget.crashes:
        return
    yield "crash", _stop(bounds, _spend(state, "crashes"), crash=True)


def _stop(bounds: Bounds, state: DeliveryState, crash: bool) -> DeliveryState:
    channels = []
    for ch_index, channel in enumerate(state.channels):
        in_flight = _unfinished_in_flight(state, ch_index, bounds) | channel.orphans
        if crash and bounds.mode == MEMORY:
            # The dead-letter topic's memory queue goes too.
            unfinished = channel.queued | channel.deferred | in_flight | channel.dead
            channel = channel._replace(
                queued=frozenset(),
                deferred=frozenset(),
                dead=frozenset(),
                lost=channel.lost | unfinished,
            )
        elif (crash and "crash_loses_in_flight" in bounds.faults) or (
            not crash and "restart_loses_in_flight" in bounds.faults
        ):
            channel = channel._replace(lost=channel.lost | in_flight)
        else:
            channel = channel._replace(queued=channel.queued | in_flight)
        channels.append(channel._replace(orphans=frozenset()))
    gone = ClientState(False, 0, frozenset(), frozenset())
    return state._replace(channels=tuple(channels), clients=(gone,) * len(state.clients))


# -- properties -----------------------------------------------------------------------------


def in_flight_to_at_most_one_client(bounds: Bounds, state: DeliveryState) -> bool | str:
    for ch_index in range(bounds.channels):
        seen: set[int] = set(state.channels[ch_index].orphans)
        for index, client in enumerate(state.clients):
            if channel_of(bounds, index) != ch_index:
                continue
            twice = seen & client.in_flight
            if twice:
                return f"m{min(twice)} of ch{ch_index} is in flight to two clients"
            seen |= client.in_flight
    return True


def each_message_in_one_place(bounds: Bounds, state: DeliveryState) -> bool | str:
    """Every acknowledged message is, on each channel, in exactly one of: queued, deferred,
    in flight (to one client or orphaned), finished, dead-lettered, lost."""
    for ch_index, channel in enumerate(state.channels):
        places = [channel.queued, channel.deferred, channel.orphans, channel.finished, channel.lost]
        places += [channel.dead, channel.expired]
        places += [
            c.in_flight for i, c in enumerate(state.clients) if channel_of(bounds, i) == ch_index
        ]
        for message in range(state.published):
            count = sum(message in place for place in places)
            if count != 1:
                return f"m{message} of ch{ch_index} is in {count} places"
    return True


def nothing_acknowledged_lost(bounds: Bounds, state: DeliveryState) -> bool | str:
    """Only the memory queue may lose messages (and only in a crash: see losses_only_in_crash)."""
    if bounds.mode == MEMORY:
        return True
    for ch_index, channel in enumerate(state.channels):
        if channel.lost:
            return f"ch{ch_index} lost {sorted(channel.lost)} with a durable queue"
    return True


def losses_only_in_crash(
    bounds: Bounds, before: DeliveryState, label: str, after: DeliveryState
) -> bool | str:
    if label == "crash" and bounds.mode == MEMORY:
        return True
    for old, new in zip(before.channels, after.channels, strict=True):
        if new.lost - old.lost:
            return f"{label} lost m{min(new.lost - old.lost)}"
    return True


def fin_only_for_current_delivery(
    bounds: Bounds, before: DeliveryState, label: str, after: DeliveryState
) -> bool | str:
    if not label.startswith("finish(") or label.endswith("FAILED"):
        return True
    client = int(label[len("finish(c") :].split(",")[0])
    ch_index = channel_of(bounds, client)
    newly = after.channels[ch_index].finished - before.channels[ch_index].finished
    stale = newly - before.clients[client].in_flight
    return not stale or f"m{min(stale)} finished by c{client}, it was not in flight to it"


def attempts_only_grow(
    bounds: Bounds, before: DeliveryState, label: str, after: DeliveryState
) -> bool | str:
    for old, new in zip(before.channels, after.channels, strict=True):
        if new.attempts is old.attempts:
            continue
        for message, attempts in enumerate(old.attempts):
            if new.attempts[message] < attempts:
                return f"m{message} attempts {attempts} → {new.attempts[message]}"
    return True


def rdy_window_respected(
    bounds: Bounds, before: DeliveryState, label: str, after: DeliveryState
) -> bool | str:
    if not label.startswith("deliver("):
        return True
    client = after.clients[int(label[len("deliver(c") :].split(",")[0])]
    return len(client.in_flight) <= client.rdy or (
        f"{len(client.in_flight)} in flight with RDY {client.rdy}"
    )


def delivered_at_most_max_attempts(
    bounds: Bounds, before: DeliveryState, label: str, after: DeliveryState
) -> bool | str:
    if not bounds.max_attempts or not label.startswith("deliver("):
        return True
    client = int(label[len("deliver(c") :].split(",")[0])
    message = int(label.split("m")[-1].rstrip(")"))
    attempts = after.channels[channel_of(bounds, client)].attempts[message]
    return attempts <= bounds.max_attempts or (
        f"m{message} delivered with attempts {attempts} > max_attempts {bounds.max_attempts}"
    )


def never_delivered_past_ttl(
    bounds: Bounds, before: DeliveryState, label: str, after: DeliveryState
) -> bool | str:
    if not label.startswith("deliver("):
        return True
    message = int(label.split("m")[-1].rstrip(")"))
    return message not in before.old or f"m{message} delivered past its TTL"


def dropped_only_where_nothing_dead_letters(
    bounds: Bounds, before: DeliveryState, label: str, after: DeliveryState
) -> bool | str:
    """A channel that dead-letters moves what expires; only one that does not drops it."""
    if not bounds.max_attempts:
        return True
    for old, new in zip(before.channels, after.channels, strict=True):
        if new.expired - old.expired:
            return f"{label} dropped m{min(new.expired - old.expired)} instead of moving it"
    return True


def unfinished(state: DeliveryState) -> Iterator[tuple[int, int]]:
    """Acknowledged messages neither finished, dead-lettered nor expired on a channel, except
    those the mode lost."""
    for ch_index, channel in enumerate(state.channels):
        for message in range(state.published):
            if (
                message not in channel.finished
                and message not in channel.lost
                and message not in channel.dead
                and message not in channel.expired
            ):
                yield ch_index, message


# -- assembly -------------------------------------------------------------------------------


def show(state: DeliveryState) -> str:
    def ids(values: frozenset[int]) -> str:
        return "{" + ",".join(f"m{m}" for m in sorted(values)) + "}"

    lines = [f"published={state.published} old={ids(state.old)} budget={tuple(state.budget)}"]
    for i, ch in enumerate(state.channels):
        lines.append(
            f"ch{i}: queued={ids(ch.queued)} deferred={ids(ch.deferred)} "
            f"orphans={ids(ch.orphans)} finished={ids(ch.finished)} lost={ids(ch.lost)} "
            f"dead={ids(ch.dead)} expired={ids(ch.expired)} attempts={list(ch.attempts)}"
        )
    for i, c in enumerate(state.clients):
        status = f"rdy={c.rdy}" if c.connected else "disconnected"
        lines.append(f"c{i}: {status} in_flight={ids(c.in_flight)} holding={ids(c.holding)}")
    return "\n".join(lines)


ACTIONS = (
    ("publish", publish, False),
    ("subscribe", subscribe, True),
    ("rdy", rdy, True),
    ("rdy_zero", rdy_zero, False),
    ("deliver", deliver, True),
    ("finish", finish, True),
    ("requeue", requeue, False),
    ("touch", touch, False),
    ("expire", expire, False),
    ("expire_orphan", expire_orphan, True),
    ("deferred_due", deferred_due, True),
    ("disconnect", disconnect, False),
    ("restart", restart, False),
    ("crash", crash, False),
    ("dead_letter", dead_letter, True),
    ("dead_letter_refused", dead_letter_refused, False),
    ("age", age, False),
    ("expire_ttl", expire_ttl, True),
)


def build(name: str, bounds: Bounds) -> Spec:
    return Spec(
        name=name,
        description="channel delivery: PUB, RDY, delivery, FIN/REQ/TOUCH, timeouts, restarts",
        init=lambda: [initial_state(bounds)],
        actions=tuple(Action(n, partial(fn, bounds), fair=fair) for n, fn, fair in ACTIONS),
        invariants=(
            Invariant(
                "a message is in flight to at most one client",
                partial(in_flight_to_at_most_one_client, bounds),
            ),
            Invariant(
                "each message is in exactly one place", partial(each_message_in_one_place, bounds)
            ),
            Invariant("nothing acknowledged is lost", partial(nothing_acknowledged_lost, bounds)),
        ),
        step_invariants=(
            StepInvariant(
                "FIN succeeds only for the current delivery",
                partial(fin_only_for_current_delivery, bounds),
            ),
            StepInvariant("attempts only grow", partial(attempts_only_grow, bounds)),
            StepInvariant(
                "the RDY window is never exceeded", partial(rdy_window_respected, bounds)
            ),
            StepInvariant(
                "messages are lost only by a crash of the memory queue",
                partial(losses_only_in_crash, bounds),
            ),
            StepInvariant(
                "a message is delivered at most max_attempts times",
                partial(delivered_at_most_max_attempts, bounds),
            ),
            StepInvariant(
                "a message past its TTL is never delivered",
                partial(never_delivered_past_ttl, bounds),
            ),
            StepInvariant(
                "a channel that dead-letters moves expired messages, never drops them",
                partial(dropped_only_where_nothing_dead_letters, bounds),
            ),
        ),
        liveness=(
            Liveness(
                "every acknowledged message is eventually finished, dead-lettered or expired",
                unfinished,
            ),
        ),
        bounds={k: v for k, v in vars(bounds).items() if k != "faults"},
        show=show,
    )


# Each configuration spends its budget where it checks most: consumers misbehaving and going
# away, or the daemon restarting and crashing with each kind of queue, or fan-out to channels.
CONFIGS = {
    "consumers": Bounds(restarts=0, crashes=0),
    "memory": Bounds(mode=MEMORY, rdy_zeros=0, disconnects=0, timeouts=0),
    "durable": Bounds(mode=DURABLE, rdy_zeros=0, disconnects=0, timeouts=0),
    "two_channels": Bounds(
        mode=DURABLE, channels=2, max_rdy=1, requeues=0, rdy_zeros=0, restarts=0
    ),
    # --max-attempts=1: every REQ or timeout sends a message to the dead-letter topic, which
    # may refuse it once; a crash of the durable queue keeps it wherever it is.
    "dead_letter": Bounds(
        mode=DURABLE,
        max_attempts=1,
        refusals=1,
        requeues=1,
        timeouts=1,
        rdy_zeros=0,
        disconnects=1,
        restarts=0,
    ),
    # --message-ttl: one message grows old at any moment; dropped, or (with --max-attempts=2)
    # moved.
    "ttl": Bounds(mode=DURABLE, ttl=True, ages=1, rdy_zeros=0, disconnects=0, restarts=0),
    "ttl_dead_letter": Bounds(
        mode=DURABLE,
        ttl=True,
        ages=1,
        max_attempts=2,
        refusals=0,
        rdy_zeros=0,
        disconnects=0,
        restarts=0,
    ),
}

# Each fault is checked in the configuration where it matters.
MUTANT_CONFIG = {
    "crash_loses_in_flight": "durable",
    "restart_loses_in_flight": "durable",
    "delivered_beyond_max_attempts": "dead_letter",
    "dead_letter_dropped": "dead_letter",
    "refused_dead_letter_dropped": "dead_letter",
    "dead_letter_never_moved": "dead_letter",
    "expired_delivered": "ttl",
    "expired_dropped_when_dead_lettering": "ttl_dead_letter",
}


def specs() -> list[Spec]:
    return [build(f"channel_delivery.{name}", bounds) for name, bounds in CONFIGS.items()]


def mutants() -> list[Mutant]:
    result = []
    for fault, description in FAULTS.items():
        config = MUTANT_CONFIG.get(fault, "consumers")
        bounds = CONFIGS[config]
        faulty = Bounds(**{**vars(bounds), "faults": frozenset({fault})})
        spec = build(f"channel_delivery.{fault}", faulty)
        result.append(Mutant(f"channel_delivery.{fault}", description, spec))
    return result
