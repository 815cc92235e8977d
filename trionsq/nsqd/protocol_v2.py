"""The V2 protocol over one connection: the magic, the command loop, and every command's
semantics and errors as nsqd has them (docs/protocol.md §1.3).

Each connection is a task in nsqd's clients nursery, running the command loop (read, parse,
execute, respond); its message pump, when it needs one, is another task there
(heartbeats.py). Commands execute synchronously; the responses of a whole read batch are sent
with one write. A batch that published is answered as acks.py decides: with --sync-ack it waits
for the disk syncer's next round (group commit) before anything of it is sent; for a replicated
topic its answers are held until a quorum has the messages while the loop reads on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..daemon import first_leaf
from ..logs import CLOSED_CONNECTION, go_net_error, go_struct
from ..net.transport import DeflateStream, SnappyStream, TransportError
from ..protocol import errors as E
from ..protocol.client_states import (
    COMMAND_STATES,
    RULES,
    STATE_DISCONNECTED,
    CommandRule,
    Verdict,
)
from ..protocol.commands import MAGIC_V2, Command
from ..protocol.errors import ProtocolError
from ..protocol.frames import CLOSE_WAIT_FRAME, OK_FRAME, encode_error, encode_response
from ..protocol.goquote import go_quote
from ..protocol.names import is_valid_channel_name, is_valid_topic_name
from ..protocol.negotiation import IdentifyResult, negotiate
from ..protocol.parser import CommandParser, parse_uint
from . import acks
from .auth import AuthError, AuthRequest, is_tls, query_any, tls_common_name
from .backend import BackendError
from .bounds import QueueFull
from .channel import ChannelError
from .client_v2 import ClientV2
from .heartbeats import stop_pump
from .socket_stream import DirectSocketStream
from .topic import TopicExiting

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("trionsq.nsqd")

READ_SIZE = 65536
LINE_TOO_LONG = "command line too long"
#: Go's UpgradeTLS deadline for the handshake.
TLS_HANDSHAKE_TIMEOUT = 5.0

# The state table's rows, looked up once: the handlers check states against them.
_SUB_RULE = RULES[b"SUB"]
_RDY_RULE = RULES[b"RDY"]
_REQ_RULE = RULES[b"REQ"]
_TOUCH_RULE = RULES[b"TOUCH"]
_CLS_RULE = RULES[b"CLS"]


def _leads_to(rule: CommandRule) -> int:
    assert rule.next_state is not None, rule
    return rule.next_state


# The states a successful SUB and CLS lead to.
_SUBSCRIBED = _leads_to(_SUB_RULE)
_CLOSING = _leads_to(_CLS_RULE)

#: FIN is the commonest command: its check is one membership test.
FIN_STATES = RULES[b"FIN"].allowed
_FIN_REFUSAL = RULES[b"FIN"].refusal
#: The commands whose state nsqd checks before it reads their body.
_BODY_RULES = {name: RULES[name] for name in (b"IDENTIFY", b"AUTH")}
#: Commands every state allows: their handlers check nothing.
_UNCHECKED = (b"NOP", b"PUB", b"MPUB", b"DPUB")

# FIN's check and the unchecked commands are shortcuts that hold only for the table as it is.
if RULES[b"FIN"].ignored or any(RULES[n].allowed != set(COMMAND_STATES) for n in _UNCHECKED):
    raise RuntimeError("the state table changed: update protocol_v2's shortcuts (FIN, _UNCHECKED)")


def to_int64(value: int) -> int:
    """Go's int64(uint64) conversion, as nsqd applies it to parsed counts and timeouts."""
    return value - (1 << 64) if value >= (1 << 63) else value


async def handle_connection(nsqd: NSQD, stream: trio.SocketStream | trio.abc.Stream) -> None:
    """Serve one client connection until it closes: the magic, then the command loop.
    Whatever goes wrong ends this connection only: a client going away is ordinary, anything
    else is logged as a bug.

    What an idle connection holds is kept small (10,000 of them are a benchmark): one
    coroutine frame here (no `_serve` beneath), no nursery and no message pump task until the
    client needs one (its first delivery; `heartbeats.py` sends the heartbeats until then),
    and one cancel scope (the command loop's: both its read deadline and what closes the
    connection from outside, `ClientV2.close_connection`)."""
    remote = _remote_address(stream)
    log.info("TCP: new client(%s)", remote)
    if isinstance(stream, trio.SocketStream):
        stream = DirectSocketStream(stream, nsqd.options.busy_poll)
    try:
        magic = b""
        failure: BaseException | str = "i/o timeout"  # Go's read error at the deadline
        with trio.move_on_after(nsqd.options.client_timeout):
            while len(magic) < 4:
                # Only the magic: a whole first read kept here would stay for the connection's
                # life.
                try:
                    chunk = await stream.receive_some(4 - len(magic))
                except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                    failure = err
                    break
                if not chunk:
                    failure = "unexpected EOF" if magic else "EOF"
                    break
                magic += chunk
        if len(magic) < 4:
            if failure in ("EOF", "unexpected EOF"):
                reason = str(failure)
            else:
                reason = go_net_error(stream, remote, "read", failure)
            log.error("failed to read protocol version - %s", reason)
            return
        shown = magic.decode("utf-8", "replace")
        log.info("CLIENT(%s): desired protocol magic '%s'", remote, shown)
        if magic != MAGIC_V2:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(encode_error(E.E_BAD_PROTOCOL.encode()))
            log.error("client(%s) bad protocol magic '%s'", remote, shown)
            return
        client = nsqd.new_client(stream, remote)
        nsqd.heartbeats.add(client)
        # Go's IOLoop error, logged by its TCP handler once the loop has ended.
        exit_error: str | None = None
        try:
            exit_error = await _command_loop(nsqd, client, bytes(magic[4:]))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
            exit_error = "failed to send response - " + go_net_error(
                client.stream, remote, "write", err
            )
        except trio.Cancelled:
            if nsqd.exiting:  # Go's shutdown closes every connection under its IOLoop
                exit_error = "failed to read command - " + go_net_error(
                    client.stream, remote, "read", CLOSED_CONNECTION
                )
            raise
        finally:
            stop_pump(client)
            _disconnect(nsqd, client, exit_error)
    except* (trio.BrokenResourceError, trio.ClosedResourceError) as gone:
        log.error("client(%s) - %s", remote, first_leaf(gone))
    except* Exception:
        log.exception("PROTOCOL(V2): [%s] internal error, closing the connection", remote)
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)
        nsqd.memory_trimmer.connection_closed()


def _remote_address(stream: trio.abc.Stream) -> str:
    sock = getattr(stream, "socket", None)
    if sock is None:
        return "memory"
    try:
        peer = sock.getpeername()
    except OSError:
        return "unknown"
    if isinstance(peer, tuple):
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(peer) or "unix"


def _disconnect(nsqd: NSQD, client: ClientV2, exit_error: str | None) -> None:
    """The connection's end, with Go's lines: its IOLoop's exit, the error that ended it (as
    Go's TCP handler logs it) and its messagePump's exit (every Go client has one)."""
    remote = client.remote_address
    log.info("PROTOCOL(V2): [%s] exiting ioloop", remote)
    client.state = STATE_DISCONNECTED
    for topic in client.pump_later:  # published, not yet moved on: the pump tasks do it
        topic.wake.set()
    client.pump_later.clear()
    if client.channel is not None:
        client.channel.remove_client(client)
    nsqd.remove_client(client)
    if exit_error:
        log.error("client(%s) - %s", remote, exit_error)
    log.info("PROTOCOL(V2): [%s] exiting messagePump", remote)


async def _command_loop(nsqd: NSQD, client: ClientV2, initial: bytes) -> str | None:
    """Serve the connection's commands until it ends; the error that ended it as Go's IOLoop
    returns it (None for a clean end: EOF between commands)."""
    parser = _new_parser(nsqd, client)
    exit_error: str | None = None
    handlers = _HANDLERS
    stream = client.stream
    # The read deadline, and what `ClientV2.close_connection` cancels: one scope for both
    # (each costs ~0.6 KB per connection), told apart by whether the deadline has passed.
    read_deadline = client.connection_scope = trio.CancelScope()
    read_until = math.inf  # read_deadline's deadline
    data = initial
    with read_deadline:
        while True:
            if data:
                held = client.held
                if held is not None and not await held.wait():
                    await _close_after_error(client)
                    return None
                parser.feed(data)
                data = b""  # the parser keeps what it needs: hold no read while waiting
                fatal = False
                upgrade: IdentifyResult | None = None
                while True:
                    try:
                        fins = parser.take_fins()
                        if fins:
                            _fin_run(nsqd, client, fins)
                            continue
                        cmd = parser.next_command()
                        if cmd is None:
                            break
                        handler = handlers.get(cmd.name)
                        if handler is None:
                            raise ProtocolError(
                                E.E_INVALID,
                                f"invalid command {cmd.name.decode('utf-8', 'replace')}",
                            )
                        try:
                            handler(nsqd, client, cmd)
                        except AwaitFirst as step:
                            # AUTH and re-authorisation ask the auth server: the one place
                            # a command awaits (the handlers stay synchronous).
                            await step.prelude()
                            if step.rerun:
                                handler(nsqd, client, cmd)
                    except ProtocolError as err:
                        if err.text == LINE_TOO_LONG:
                            # nsqd's line reader fails: it closes without an error frame.
                            exit_error = "failed to read command - bufio: buffer full"
                            fatal = True
                            break
                        _answer_error(client, err)
                        if err.fatal:
                            exit_error = str(err)
                            fatal = True
                            break
                    except _Upgrade as granted:
                        # The rest of this read is dropped, as Go's bufio reader is replaced.
                        upgrade = granted.result
                        break
                if client.unsynced_publish:
                    if nsqd.options.sync_ack or fatal or upgrade is not None:
                        if not await _wait_durable(nsqd, client):
                            return str(acks.NOT_DURABLE)
                    else:
                        # Replication: the answers are sent once a quorum has the messages,
                        # by the task that sees it; this one reads on.
                        client.unsynced_publish = False
                        acks.hold_answers(client)
                if fatal:
                    await _close_after_error(client)
                    return exit_error
                if upgrade is not None:
                    read_until = read_deadline.deadline = math.inf  # the handshake has its own
                    if not await _upgrade(nsqd, client, upgrade):
                        return None
                    stream = client.stream
                    parser = _new_parser(nsqd, client)
                channel = client.channel
                if channel is not None and client.wants_refill():
                    # (a message published before these FINs were read waits here for them)
                    _send_from_here(nsqd, channel.dispatch)
                if client.out:
                    await client.flush()
                if client.pump_later:
                    # What this batch published goes to the channels once it is answered.
                    _pump(nsqd, client)
            # Go closes a connection that sends nothing for two heartbeat intervals. Moving
            # the scope's deadline costs a heap update, so it moves only once it has fallen
            # behind (or is too far ahead: IDENTIFY shortened the interval), and then an
            # eighth of an interval further: the close comes 2 to 2.25 intervals after the
            # last read.
            interval = client.heartbeat_interval
            if interval:
                wanted = trio.current_time() + 2 * interval
                if not wanted <= read_until <= wanted + interval / 4:
                    read_until = wanted + interval / 8
                    read_deadline.deadline = read_until
            elif read_until != math.inf:
                read_until = read_deadline.deadline = math.inf
            try:
                received = await stream.receive_some(READ_SIZE)
            except TransportError as err:
                return f"failed to read command - {err}"
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                return "failed to read command - " + go_net_error(
                    stream, client.remote_address, "read", err
                )
            if not received:
                held = client.held
                if held is not None and await held.wait():
                    await client.flush()  # a half-closed publisher still reads its OK
                exit_error = await _answer_cut_short(client, parser, None)
                if exit_error is None and isinstance(stream, DeflateStream) and not stream.ended:
                    # Go's flate reader: the stream ended without its final block.
                    exit_error = "failed to read command - unexpected EOF"
                return exit_error
            data = received if type(received) is bytes else bytes(received)
    if not read_deadline.cancelled_caught:
        return None
    if trio.current_time() >= read_until:
        # No heartbeat reply in time: Go's read deadline.
        timeout = go_net_error(stream, client.remote_address, "read", "i/o timeout")
        exit_error = await _answer_cut_short(client, parser, timeout)
        return exit_error or f"failed to read command - {timeout}"
    # Closed from outside (`ClientV2.close_connection`): Go closes the socket under its read.
    return "failed to read command - " + go_net_error(
        stream, client.remote_address, "read", CLOSED_CONNECTION
    )


async def _wait_durable(nsqd: NSQD, client: ClientV2) -> bool:
    """--sync-ack: hold the batch's answers until what it published is fsynced. If the disk
    fails to, the answers are dropped, a fatal E_PUB_FAILED is sent instead and the connection
    closes (the publisher sees no OK, and publishes again)."""
    client.unsynced_publish = False
    client.holding = True
    owed, client.owed = client.owed, None
    try:
        durable = await acks.wait_durable(nsqd, owed)
    finally:
        client.holding = False
    if durable:
        return True
    log.error("[%s] - %s", client.remote_address, acks.NOT_DURABLE)
    client.out = bytearray(encode_error(acks.NOT_DURABLE.body))
    await _close_after_error(client)
    return False


async def _close_after_error(client: ClientV2) -> None:
    """After a fatal error: send what is buffered, the error last, and deliver nothing more.
    The state changes first, so that no message is delivered while the output drains: it would
    reach a connection about to close and stay in flight there until it timed out."""
    client.state = STATE_DISCONNECTED
    await client.drain()


async def _answer_cut_short(
    client: ClientV2, parser: CommandParser, cause: str | None
) -> str | None:
    """The stream ended (EOF, or the read deadline passed: `cause`): if a body was cut short,
    nsqd logs and answers with its read error before closing (a half-closed client still
    reads it); that error, or None."""
    try:
        parser.eof()
    except ProtocolError as err:
        if cause is None:
            cause = _eof_cause(parser, err)
        # str(err): a record kept (a test's, a buffering handler's) must not keep the
        # parser's partial body alive through the error's traceback
        log.error("[%s] - %s - %s", client.remote_address, str(err), cause)
        client.out += encode_error(err.body)
        with trio.move_on_after(1):
            try:
                await client.drain()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        return str(err)
    return None


def _eof_cause(parser: CommandParser, err: ProtocolError) -> str:
    """What Go's reader returned when the stream ended inside a body: io.EOF if none of the
    piece it was reading (a size, a count, a body) had come, else io.ErrUnexpectedEOF."""
    received = parser.buffered
    if not err.text.startswith("MPUB") and err.text.endswith("body"):
        received -= 4  # the body's size came whole: only the body counts
    return "unexpected EOF" if received > 0 else "EOF"


# -- command handlers (synchronous) ---------------------------------------------------------


def _new_parser(nsqd: NSQD, client: ClientV2) -> CommandParser:
    """A parser for the connection as it is now (a new one after each upgrade)."""
    opts = nsqd.options
    check = _body_state_check(client)
    if opts.tls_required != "false" and client.tls is None:
        check = _tls_required_check(check)
    return CommandParser(
        max_msg_size=opts.max_msg_size,
        max_body_size=opts.max_body_size,
        # The parser checks DPUB's delay against it (--max-defer-timeout, or --max-req-timeout).
        max_req_timeout_ms=int(opts.defer_limit * 1000),
        check_line=check,
        new_id_runs=nsqd.guid.next_id_runs,  # publishes arrive framed (topic.put_frames)
    )


def _tls_required_check(
    then: Callable[[bytes, tuple[bytes, ...]], None],
) -> Callable[[bytes, tuple[bytes, ...]], None]:
    """Go's enforceTLSPolicy (--tls-required true or tcp-https) until the connection is TLS:
    every command but IDENTIFY, even an unknown one, is fatal before its body is read."""

    def check(name: bytes, params: tuple[bytes, ...]) -> None:
        if name != b"IDENTIFY":
            raise ProtocolError(
                E.E_INVALID,
                f"cannot {name.decode('utf-8', 'replace')} in current state (TLS required)",
            )
        then(name, params)

    return check


def _body_state_check(client: ClientV2) -> Callable[[bytes, tuple[bytes, ...]], None]:
    """The state checks nsqd makes before it reads IDENTIFY's or AUTH's body."""
    body_rules = _BODY_RULES

    def check(name: bytes, params: tuple[bytes, ...]) -> None:
        rule = body_rules.get(name)
        if rule is not None and client.state not in rule.allowed:
            raise rule.refusal()

    return check


def _state_allows(client: ClientV2, rule: CommandRule) -> bool:
    """Whether the client's state lets the command execute: False when the state ignores it;
    raises the table's error when the state refuses it."""
    verdict = rule.verdict(client.state)
    if verdict is Verdict.REFUSED:
        raise rule.refusal()
    return verdict is Verdict.ALLOWED


#: Go's identifyDataV2, whose ``%+v`` its IDENTIFY line prints: (field, JSON key, zero value).
_IDENTIFY_FIELDS = (
    ("ClientID", "client_id", ""),
    ("Hostname", "hostname", ""),
    ("HeartbeatInterval", "heartbeat_interval", 0),
    ("OutputBufferSize", "output_buffer_size", 0),
    ("OutputBufferTimeout", "output_buffer_timeout", 0),
    ("FeatureNegotiation", "feature_negotiation", False),
    ("TLSv1", "tls_v1", False),
    ("Deflate", "deflate", False),
    ("DeflateLevel", "deflate_level", 0),
    ("Snappy", "snappy", False),
    ("SampleRate", "sample_rate", 0),
    ("UserAgent", "user_agent", ""),
    ("MsgTimeout", "msg_timeout", 0),
)


def _log_identify(client: ClientV2, fields: dict[str, Any]) -> None:
    """Go's ``[addr] IDENTIFY: {ClientID:... MsgTimeout:...}``: the body as decoded, before
    its values are checked."""
    if log.isEnabledFor(logging.INFO):
        values = ((name, fields.get(key, zero)) for name, key, zero in _IDENTIFY_FIELDS)
        log.info("[%s] IDENTIFY: %s", client.remote_address, go_struct(values))


def _identify(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    assert isinstance(cmd.body, bytes)
    result = negotiate(cmd.body, nsqd.identify_limits, lambda fields: _log_identify(client, fields))
    # nsqd takes both as given, empty when absent.
    client.client_id = result.client_id or ""
    client.hostname = result.hostname or ""
    client.user_agent = result.user_agent
    client.output_buffer_size = result.output_buffer_size
    client.output_buffer_timeout = result.output_buffer_timeout_ms / 1000
    # Like nsqd, only the first IDENTIFY reaches the message pump.
    if not client.identified:
        client.identified = True
        if result.heartbeat_interval_ms == -1:
            client.heartbeat_interval = None
        else:
            client.heartbeat_interval = result.heartbeat_interval_ms / 1000
            client.next_heartbeat = trio.current_time() + client.heartbeat_interval
        client.sample_rate = result.sample_rate
        client.msg_timeout = result.msg_timeout_ms / 1000
        client.wake.set()
    reply = result.reply(nsqd.identify_limits)
    if nsqd.replication is not None and "replication" in result.raw:
        # A member of this node's replica set: the connection becomes its stream (`_upgrade`).
        reply = nsqd.replication.identify_reply(
            client, result.raw["replication"], reply, result.tls_v1
        )
        client.out += encode_response(reply)
        raise _Upgrade(result)
    client.out += encode_response(reply)
    if result.tls_v1 or result.snappy or result.deflate:
        raise _Upgrade(result)


class _Upgrade(Exception):
    """Raised by IDENTIFY once it granted TLS, snappy or deflate: the command loop stops
    executing that read's commands and upgrades the connection (`_upgrade`)."""

    def __init__(self, result: IdentifyResult) -> None:
        super().__init__()
        self.result = result


async def _upgrade(nsqd: NSQD, client: ClientV2, result: IdentifyResult) -> bool:
    """Go's IDENTIFY after its checks: send the reply in plaintext, then upgrade in NSQ's
    order, TLS, then snappy or deflate, each confirmed by an OK sent over the new layer. No
    other task sends meanwhile: with `sending` set, the pump's flushes leave their bytes
    (heartbeats) in `client.out` for later. Layers are built as Go builds them: TLS over the
    socket, compression over TLS or the socket. Returns False when the connection cannot go on
    (a failed handshake): the error is logged and sent, and only this connection closes."""
    # A member of this node's replica set: its connection becomes its stream, over TLS when
    # both have it configured (and never over snappy or deflate).
    peer = nsqd.replication if "replication" in result.raw else None
    if peer is not None and not result.tls_v1:
        await peer.serve(client)
        return False
    await client.drain()
    client.sending = True
    failure = ""
    try:
        socket_stream = _bottom(client.stream)
        try:
            if result.tls_v1:
                log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", client.remote_address)
                assert nsqd.tls_context is not None  # TLS is granted only with a context
                tls = trio.SSLStream(
                    socket_stream, nsqd.tls_context, server_side=True, https_compatible=True
                )
                with trio.fail_after(TLS_HANDSHAKE_TIMEOUT):
                    await tls.do_handshake()
                client.stream = client.tls = tls
                await tls.send_all(OK_FRAME)
            base = client.tls if client.tls is not None else socket_stream
            if result.snappy:
                log.info("PROTOCOL(V2): [%s] upgrading connection to snappy", client.remote_address)
                client.stream = SnappyStream(base)
                client.snappy = True
                await client.stream.send_all(OK_FRAME)
            if result.deflate:
                log.info(
                    "PROTOCOL(V2): [%s] upgrading connection to deflate (level %d)",
                    client.remote_address,
                    result.deflate_level,
                )
                client.stream = DeflateStream(base, result.deflate_level)
                client.deflate = True
                await client.stream.send_all(OK_FRAME)
        except trio.TooSlowError:
            failure = "i/o timeout"
        except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
            failure = _describe(err)
    finally:
        client.sending = False
        if client.send_done:
            client.send_done.unpark_all()
    if not failure:
        if peer is not None:
            await peer.serve(client)
            return False
        return True
    refusal = ProtocolError(E.E_IDENTIFY_FAILED, f"IDENTIFY failed {failure}")
    log.error("[%s] - %s - %s", client.remote_address, refusal, failure)  # Go: its cause too
    # Like Go, over the last layer that worked (after a failed handshake, in plaintext).
    client.out += encode_error(refusal.body)
    with trio.move_on_after(1):
        try:
            await _close_after_error(client)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    return False


def _bottom(stream: trio.abc.Stream) -> trio.abc.Stream:
    """The socket stream beneath a connection's layers."""
    while True:
        below = getattr(stream, "transport_stream", None)
        if below is None:
            return stream
        stream = below


def _describe(err: BaseException) -> str:
    """A failed handshake's reason: the SSL error trio wraps, or the error itself."""
    cause = err.__cause__
    if isinstance(cause, ssl.SSLError):
        return cause.reason or str(cause)
    return str(cause or err) or type(err).__name__


class AwaitFirst(Exception):
    """Raised by a synchronous handler that needs an await (an auth server round trip): the
    command loop awaits `prelude`, then runs the handler again if `rerun`."""

    def __init__(self, prelude: Callable[[], Awaitable[None]], rerun: bool) -> None:
        super().__init__()
        self.prelude = prelude
        self.rerun = rerun


def _auth(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    assert isinstance(cmd.body, bytes)
    if client.auth_state is not None and client.auth_state.authorizations:
        raise ProtocolError(E.E_INVALID, "AUTH already set")
    if not nsqd.auth_enabled:
        raise ProtocolError(E.E_AUTH_DISABLED, "AUTH disabled")
    secret = cmd.body.decode("utf-8", "surrogateescape")

    async def authenticate() -> None:
        client.auth_secret = secret
        await _query_auth(nsqd, client)
        state = client.auth_state
        assert state is not None
        if not state.authorizations:
            raise ProtocolError(E.E_UNAUTHORIZED, "AUTH no authorizations found")
        reply = {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
        client.out += encode_response(json.dumps(reply, separators=(",", ":")).encode())

    raise AwaitFirst(authenticate, rerun=False)


async def _query_auth(nsqd: NSQD, client: ClientV2) -> None:
    """Ask the auth servers about the client's secret; E_AUTH_FAILED if none answers well
    (the reason is logged, not told to an untrusted client)."""
    opts = nsqd.options
    request = AuthRequest(
        remote_ip=_remote_ip(client.remote_address),
        tls=is_tls(client.stream),
        secret=client.auth_secret,
        common_name=tls_common_name(client.stream),
    )
    try:
        client.auth_state = await query_any(
            opts.auth_http_addresses,
            request,
            method=opts.auth_http_request_method,
            connect_timeout=opts.http_client_connect_timeout,
            request_timeout=opts.http_client_request_timeout,
            verify=opts.tls_root_ca_file or True,
        )
    except AuthError as err:
        log.warning("PROTOCOL(V2): [%s] AUTH failed %s", client.remote_address, err)
        raise ProtocolError(E.E_AUTH_FAILED, "AUTH failed") from None


def _remote_ip(remote: str) -> str:
    if remote in ("memory", "unknown", "unix") or ":" not in remote:
        return ""
    return remote.rpartition(":")[0].strip("[]")


def _check_auth(nsqd: NSQD, client: ClientV2, command: str, topic: str, channel: str) -> None:
    """Go's CheckAuth, for PUB, MPUB, DPUB (channel "") and SUB when auth is enabled."""
    state = client.auth_state
    if state is None or not state.authorizations:
        raise ProtocolError(E.E_AUTH_FIRST, f"AUTH required before {command}")
    if state.expired:

        async def ask_again() -> None:
            await _query_auth(nsqd, client)
            _authorize(client, command, topic, channel)

        raise AwaitFirst(ask_again, rerun=True)
    _authorize(client, command, topic, channel)


def _authorize(client: ClientV2, command: str, topic: str, channel: str) -> None:
    state = client.auth_state
    if state is None or not state.allows(topic, channel):
        raise ProtocolError(
            E.E_UNAUTHORIZED,
            f"AUTH failed for {command} on {go_quote(topic.encode())} {go_quote(channel.encode())}",
        )


def _sub(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    if not _state_allows(client, _SUB_RULE):
        return
    if not client.heartbeat_interval:
        raise ProtocolError(E.E_INVALID, "cannot SUB with heartbeats disabled")
    params = cmd.params
    if len(params) < 2:
        raise ProtocolError(E.E_INVALID, "SUB insufficient number of parameters")
    topic_name = _valid_name(params[0], is_valid_topic_name)
    if topic_name is None:
        raise ProtocolError(E.E_BAD_TOPIC, f"SUB topic name {go_quote(params[0])} is not valid")
    channel_name = _valid_name(params[1], is_valid_channel_name)
    if channel_name is None:
        raise ProtocolError(E.E_BAD_CHANNEL, f"SUB channel name {go_quote(params[1])} is not valid")
    if nsqd.auth_enabled:
        _check_auth(nsqd, client, "SUB", topic_name, channel_name)
    topic = nsqd.get_topic(topic_name)
    channel = topic.get_channel(channel_name)
    limit = nsqd.options.max_channel_consumers
    if limit and len(channel.clients) >= limit:
        raise ProtocolError(
            E.E_SUB_FAILED,
            f"SUB failed consumers for {topic_name}:{channel_name} exceeds limit of {limit}",
        )
    if channel.exiting or topic.exiting:
        raise ProtocolError(E.E_SUB_FAILED, "SUB failed to deleted topic/channel")
    client.subscribed(channel)
    channel.add_client(client)
    client.state = _SUBSCRIBED
    client.out += OK_FRAME


def _valid_name(raw: bytes, is_valid: Callable[[str], bool]) -> str | None:
    try:
        name = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    return name if is_valid(name) else None


def _rdy(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    if not _state_allows(client, _RDY_RULE):
        # Ignored only after CLS (the state table's one ignoring state for RDY).
        log.info(
            "PROTOCOL(V2): [%s] ignoring RDY after CLS in state ClientStateV2Closing",
            client.remote_address,
        )
        return
    count = 1
    if cmd.params:
        parsed = parse_uint(cmd.params[0])
        if parsed is None:
            raise ProtocolError(
                E.E_INVALID, f"RDY could not parse count {cmd.params[0].decode('utf-8', 'replace')}"
            )
        count = to_int64(parsed)
    max_rdy = nsqd.options.max_rdy_count
    if count < 0 or count > max_rdy:
        raise ProtocolError(E.E_INVALID, f"RDY count {count} out of range 0-{max_rdy}")
    client.rdy = count
    if client.channel is not None:
        _send_from_here(nsqd, client.channel.dispatch)


def _message_id(cmd: Command, name: str, min_params: int) -> bytes:
    if len(cmd.params) < min_params:
        raise ProtocolError(E.E_INVALID, f"{name} insufficient number of params")
    message_id = cmd.params[0]
    if len(message_id) != 16:
        raise ProtocolError(E.E_INVALID, "invalid message ID")
    return message_id


def _fin(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    if client.state not in FIN_STATES:
        raise _FIN_REFUSAL()
    params = cmd.params
    if not params:
        raise ProtocolError(E.E_INVALID, "FIN insufficient number of params")
    message_id = params[0]
    if len(message_id) != 16:
        raise ProtocolError(E.E_INVALID, "invalid message ID")
    # FIN is the commonest command: its checks are inlined rather than shared with REQ and
    # TOUCH (_state_allows, _message_id), and the usual case, the message is this
    # client's, is handled here.
    entry = client.in_flight.pop(message_id, None)
    if entry is not None:
        if client.irregular:
            client.irregular.discard(message_id)
        client.finish_count += 1
        channel = client.channel
        assert channel is not None  # set wherever FIN is allowed
        if channel.backend.owed:
            channel.backend.release(message_id)
        e2e = channel.e2e
        if e2e is not None:
            e2e.record_frame(entry[0])
        return
    assert client.channel is not None
    try:
        client.channel.finish(client, message_id)
    except ChannelError as err:
        raise _refused(E.E_FIN_FAILED, "FIN", message_id, err) from None


def _pump(nsqd: NSQD, client: ClientV2) -> None:
    """Move what `client`'s last batch published on to the channels, and send the
    subscribers their messages from this task (`_send_from_here`)."""
    topics, client.pump_later = client.pump_later, []

    def pump() -> None:
        for topic in topics:
            topic.pump()

    _send_from_here(nsqd, pump)


def _send_from_here(nsqd: NSQD, deliver: Callable[[], object]) -> None:
    """Run `deliver` (topic pumps, a channel's dispatch), and send the subscribers it gives
    messages to from this task: a message pump woken for each would cost a scheduler pass
    per subscriber, as much again as the publish (`ClientV2.send_now`)."""
    receivers: list[ClientV2] = []
    nsqd.sending_now = receivers
    try:
        deliver()
    finally:
        nsqd.sending_now = None
    for receiver in receivers:
        receiver.send_now()


def _fin_run(nsqd: NSQD, client: ClientV2, message_ids: list[bytes]) -> None:
    """Consecutive FINs (`CommandParser.take_fins`), as `_fin` would execute them one by one:
    a FIN the channel refuses is answered with its error and the others go on; a state that
    refuses FIN raises its fatal error (the connection closes, the rest does not matter)."""
    if client.state not in FIN_STATES:
        raise _FIN_REFUSAL()
    in_flight = client.in_flight
    channel = client.channel
    assert channel is not None  # set wherever FIN is allowed
    backend = channel.backend
    e2e = channel.e2e
    finished = 0
    for message_id in message_ids:
        entry = in_flight.pop(message_id, None)
        if entry is None:
            try:
                channel.finish(client, message_id)
            except ChannelError as err:
                _answer_error(client, _refused(E.E_FIN_FAILED, "FIN", message_id, err))
            continue
        finished += 1
        if client.irregular:
            client.irregular.discard(message_id)
        if backend.owed:
            backend.release(message_id)
        if e2e is not None:
            e2e.record_frame(entry[0])
    client.finish_count += finished


def _answer_error(client: ClientV2, err: ProtocolError) -> None:
    """Log a command's error as nsqd does (at ERROR, fatal or not) and queue its error
    frame."""
    log.error("[%s] - %s", client.remote_address, str(err))
    client.out += encode_error(err.body)


def _refused(code: str, name: str, message_id: bytes, err: ChannelError) -> ProtocolError:
    """The non-fatal error of a FIN, REQ or TOUCH the channel refused."""
    return ProtocolError(code, f"{name} {message_id.decode('ascii', 'replace')} failed {err}")


def _req(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    if not _state_allows(client, _REQ_RULE):
        return
    message_id = _message_id(cmd, "REQ", 2)
    parsed = parse_uint(cmd.params[1])
    if parsed is None:
        raise ProtocolError(
            E.E_INVALID, f"REQ could not parse timeout {cmd.params[1].decode('utf-8', 'replace')}"
        )
    timeout_ms = to_int64(parsed)
    max_ms = int(nsqd.options.max_req_timeout * 1000)
    clamped = min(max(timeout_ms, 0), max_ms)
    if clamped != timeout_ms:
        log.info(
            "PROTOCOL(V2): [%s] REQ timeout %d out of range 0-%d. Setting to %d",
            client.remote_address,
            timeout_ms,
            max_ms,
            clamped,
        )
    assert client.channel is not None
    try:
        client.channel.requeue(client, message_id, clamped / 1000)
    except ChannelError as err:
        raise _refused(E.E_REQ_FAILED, "REQ", message_id, err) from None


def _touch(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    if not _state_allows(client, _TOUCH_RULE):
        return
    message_id = _message_id(cmd, "TOUCH", 1)
    assert client.channel is not None
    try:
        client.channel.touch(client, message_id)
    except ChannelError as err:
        raise _refused(E.E_TOUCH_FAILED, "TOUCH", message_id, err) from None


def _nop(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    pass


def _cls(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    if not _state_allows(client, _CLS_RULE):
        return
    client.rdy = 0
    client.state = _CLOSING
    client.out += CLOSE_WAIT_FRAME


def _publish(
    nsqd: NSQD, client: ClientV2, cmd: Command, frames: list[bytes], defer: float, failed: str
) -> None:
    """PUB, MPUB and DPUB after the parser's checks (which framed the messages): queue the
    messages, answer OK."""
    topic_name = cmd.params[0].decode("ascii")
    if nsqd.auth_enabled:
        _check_auth(nsqd, client, cmd.name.decode(), topic_name, "")
    topic = nsqd.get_topic(topic_name)
    try:
        receipt = topic.put_frames(frames, defer, client.pump_later)
    except (TopicExiting, BackendError) as err:
        raise ProtocolError(failed, f"{cmd.name.decode()} failed {err}") from None
    except QueueFull as err:
        # A full bounded queue (bounds.py): the publisher may retry on this connection.
        raise ProtocolError(failed, f"{cmd.name.decode()} failed {err}", fatal=False) from None
    counts = client.pub_counts
    if not counts:
        nsqd.producers[client.id] = client
    counts[topic_name] = counts.get(topic_name, 0) + len(frames)
    client.out += OK_FRAME
    if nsqd.hold_acks:
        acks.published(client, receipt)


def _pub(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    assert isinstance(cmd.body, list)
    _publish(nsqd, client, cmd, cmd.body, 0.0, E.E_PUB_FAILED)


def _mpub(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    assert isinstance(cmd.body, list)
    _publish(nsqd, client, cmd, cmd.body, 0.0, E.E_MPUB_FAILED)


def _dpub(nsqd: NSQD, client: ClientV2, cmd: Command) -> None:
    assert isinstance(cmd.body, list)
    defer_ms = to_int64(parse_uint(cmd.params[1]) or 0)  # range checked by the parser
    _publish(nsqd, client, cmd, cmd.body, defer_ms / 1000, E.E_DPUB_FAILED)


Handler = Callable[["NSQD", ClientV2, Command], None]

_HANDLERS: dict[bytes, Handler] = {
    b"FIN": _fin,
    b"RDY": _rdy,
    b"REQ": _req,
    b"PUB": _pub,
    b"MPUB": _mpub,
    b"DPUB": _dpub,
    b"NOP": _nop,
    b"TOUCH": _touch,
    b"SUB": _sub,
    b"CLS": _cls,
    b"AUTH": _auth,
    b"IDENTIFY": _identify,
}
