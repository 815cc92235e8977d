"""What a replica does with each request a member sends it for the topic (node.py dispatches
them): heartbeats, messages, FIN batches, channel changes, pre-votes and votes, SYNC, and
the questions of a merge (summary, dropped IDs, bodies).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from . import roles, wire
from .admin_state import parse_version
from .joining import Joining
from .log import (
    encode_records,
    split_ids,
)
from .roles import REPLICA, epoch_text

log = logging.getLogger("trionsq.nsqd")


class Handlers(Joining):
    """Handlers: see the module's docstring."""

    async def on_heartbeat(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        verdict = roles.contact_verdict(self.role, self.epoch, epoch)
        if verdict is roles.Verdict.REFUSE:
            return [self.refuse()]
        if verdict is roles.Verdict.ADOPT:
            await self.adopt(epoch, f"node {sender} leads epoch {epoch_text(epoch)}")
        self.heard(sender)
        return [
            wire.encode(
                wire.HEARTBEAT_ACK,
                {"topic": self.name, "epoch": epoch, "sent": header.get("sent", 0)},
            )
        ]

    def on_msgs(self, sender: int, header: dict[str, Any], blob: bytes) -> list[bytes]:
        epoch = int(header["epoch"])
        verdict = roles.stream_verdict(self.role, self.epoch, epoch)
        if verdict is not roles.Verdict.ACCEPT:
            # IGNORE: not synced into that epoch yet (the primary syncs it first).
            return [self.refuse()] if verdict is roles.Verdict.REFUSE else []
        try:
            self.log.append_encoded(blob)
        except ValueError as err:
            raise wire.WireError(f"bad MSGS - {err}") from None
        if self.trace is not None:
            self.trace.record(self, "wrote", sender=sender, of=epoch, total=int(header["total"]))
        self.heard(sender)
        return [wire.encode_stream(wire.ACK, self.name, epoch, int(header["total"]))]

    def on_fins(self, sender: int, header: dict[str, Any], blob: bytes) -> list[bytes]:
        epoch = int(header["epoch"])
        verdict = roles.stream_verdict(self.role, self.epoch, epoch)
        if verdict is not roles.Verdict.ACCEPT:
            return [self.refuse()] if verdict is roles.Verdict.REFUSE else []
        pos = 0
        for name, n in (header.get("channels") or {}).items():
            count = int(n)
            ids = [blob[pos + i * 16 : pos + i * 16 + 16] for i in range(count)]
            pos += count * 16
            if self.admin.deleted(str(name)):
                continue
            if str(name) not in self.log.finished:
                self.log.finished[str(name)] = set()
            self.log.finish(str(name), ids)
        if self.trace is not None:
            self.trace.record(self, "fins", sender=sender, of=epoch, count=len(blob) // 16)
        self.heard(sender)
        return []

    def on_channel(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        verdict = roles.stream_verdict(self.role, self.epoch, epoch)
        if verdict is not roles.Verdict.ACCEPT:
            return [self.refuse()] if verdict is roles.Verdict.REFUSE else []
        name = str(header.get("channel", ""))
        op = header.get("op")
        topic = self.topic
        version = parse_version(header.get("v"))
        if op == "create":
            if version is not None:
                if self.admin.set_channel(name, version, exists=True, paused=False):
                    self.admin.save()
            elif self.admin.deleted(name):
                self.admin.forget_channel(name)  # the primary knows no delete: it wins
                self.admin.save()
            if not self.admin.deleted(name):
                self.log.add_channel(name)
                topic.get_channel(name)
        elif op == "ensure" and not self.admin.deleted(name):
            if name not in self.log.finished:
                self.log.finished[name] = set()
                self.log.finish(name, ())
            if name not in topic.channels:
                topic.get_channel(name)
        elif op == "delete":
            if version is not None and self.admin.set_channel(
                name, version, exists=False, paused=False
            ):
                self.admin.save()
            if name in topic.channels:
                topic.delete_channel(name)
            self.log.delete_channel(name)
        self.heard(sender)
        return []

    def on_prevote(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        answer: dict[str, Any] = {"topic": self.name, "yes": self._may_promise(epoch)}
        waiting = (
            roles.outranks(epoch, self.epoch) and self.role == REPLICA and not self.log.damaged
        )
        if not answer["yes"] and waiting:
            # Not yet: it heard from the primary less than the failover timeout ago. When it
            # will have, the candidate asks again (it need not wait for a random pause).
            timeout = self.repl.nsqd.options.replication_failover_timeout
            answer["after"] = max(0.0, self.last_heard + timeout - trio.current_time())
        return [wire.encode(wire.PREVOTE_REPLY, {**answer, "rid": header.get("rid")})]

    async def on_prepare(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        rid = header.get("rid")
        if not self._may_promise(epoch):
            if not roles.outranks(epoch, self.epoch):
                return [self.refuse(rid)]
            return [wire.encode(wire.REFUSE, {"topic": self.name, "epoch": 0, "rid": rid})]
        if self.trace is not None:
            self.trace.record(self, "promise", to=sender, promised=epoch)
        self.step_down(epoch, f"promised epoch {epoch_text(epoch)} to node {sender}")
        self.primary = None
        await self.repl.persist(self.name)
        summary, blob = await self.summary()
        return [wire.encode(wire.PROMISE, {**summary, "topic": self.name, "rid": rid}, blob)]

    async def on_sync(self, sender: int, header: dict[str, Any]) -> list[bytes]:
        epoch = int(header["epoch"])
        rid = header.get("rid")
        verdict = roles.contact_verdict(self.role, self.epoch, epoch)
        if verdict is roles.Verdict.REFUSE:
            return [self.refuse(rid)]
        if verdict is roles.Verdict.ADOPT:
            await self.adopt(epoch, f"node {sender} leads epoch {epoch_text(epoch)}")
        self.heard(sender)
        summary, blob = await self.summary()
        return [wire.encode(wire.SUMMARY, {**summary, "topic": self.name, "rid": rid}, blob)]

    async def on_ask_summary(self, header: dict[str, Any]) -> list[bytes]:
        """This node's state, for a member repairing its log (`_repair`): no side effect."""
        summary, blob = await self.summary()
        header = {**summary, "topic": self.name, "rid": header.get("rid")}
        return [wire.encode(wire.SUMMARY, header, blob)]

    async def on_ask_dropped(self, header: dict[str, Any], blob: bytes) -> list[bytes]:
        """Which of the IDs asked about this node's compaction dropped (`_merge_dropped`)."""
        asked = split_ids(blob)

        def dropped_of() -> bytes:
            dropped = self.log.read_dropped()
            return b"".join(i for i in asked if i in dropped)

        try:
            found = await self.repl.nsqd.run_blocking(dropped_of)
        except OSError as err:
            log.error("REPLICATION(%s): failed to read the dropped IDs - %s", self.name, err)
            found = b""
        return [wire.encode(wire.DROPPED, {"topic": self.name, "rid": header.get("rid")}, found)]

    async def on_want(self, header: dict[str, Any], blob: bytes) -> list[bytes]:
        ids = split_ids(blob)
        bodies = await self._scan(lambda snapshot: encode_records(snapshot.read(ids)))
        return [wire.encode(wire.BODIES, {"topic": self.name, "rid": header.get("rid")}, bodies)]
