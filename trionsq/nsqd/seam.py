"""The seam between nsqd's core and replication, the layer above it (docs/replication.md,
trionsq/nsqd/replication/): all the core knows of it.

- `ReplicationLayer`, nsqd's `replication` (None unless --replicate-to is given; the program
  picks the layers: assembly.py): which topics it makes (`replicates`, `new_topic`), the epochs
  nsqd.dat holds for them (`load_started`, `load_finished`), a member's connection
  (`identify_reply`, `serve`), and its own tasks (`run`, under nsqd's root nursery).
- A replicated topic is a `Topic` subclass. What the core asks every topic, and an ordinary one
  answers with nothing: what a publish's OK waits for (`Topic.put_frames` hands back an
  acks.Receipt), the topic's tasks (`Topic.tasks`), its epoch for nsqd.dat
  (`Topic.replication_epoch`), its ``replication`` stats (`Topic.replication_stats`), and the
  admin actions its members must agree on (`Topic.admin`, `Topic.take_over`).
- A replicated topic's channels see their FINs through the channel's e2e slot
  (e2e_latency.FinRecorder), which the FIN paths call already: an ordinary channel pays
  nothing for it.
- PUB's OK waits for a `Receipt` in acks.py, where acknowledging a publish lives.

The core imports nothing from the replication package; the package imports the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .backend import Backend
    from .client_v2 import ClientV2
    from .topic import Topic


class ReplicationLayer(Protocol):
    """Replicated topics on this node (replication/node.py `Replication`)."""

    def replicates(self, name: str) -> bool:
        """Whether topic `name` is replicated (it is made by `new_topic`)."""
        ...

    def new_topic(self, name: str, backend: Backend) -> Topic:
        """The replicated topic `name`, over `backend` (its tasks: `Topic.tasks`)."""
        ...

    def load_started(self, epochs: dict[str, int]) -> None:
        """nsqd.dat is being loaded: the epochs it holds, by topic, for `new_topic`."""
        ...

    def load_finished(self) -> None: ...

    def identify_reply(
        self, client: ClientV2, raw: Any, reply: bytes, tls_requested: bool
    ) -> bytes:
        """IDENTIFY with a ``replication`` key (a member dialled): its checked answer. Raises
        protocol.errors.ProtocolError (E_IDENTIFY_FAILED) when the member is refused."""
        ...

    async def serve(self, client: ClientV2) -> None:
        """The member's connection, after IDENTIFY: served until it ends."""
        ...

    async def run(self, *, task_status: Any = ...) -> None:
        """The layer's own tasks (its peers, fsyncs, timeouts), until cancelled."""
        ...
