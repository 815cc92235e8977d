"""nsqd with the layers its options ask for: the core (nsqd.py) and, with --replicate-to,
replicated topics on top of it (trionsq/nsqd/replication/, through seam.py). The one place
that knows both: the core never imports the layer above it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .nsqd import NSQD
    from .options import NSQDOptions


def new_nsqd(options: NSQDOptions, **kwargs: Any) -> NSQD:
    """An `NSQD` for `options` (`kwargs`: NSQD's others); a plain nsqd never imports the
    replication modules."""
    from .nsqd import NSQD

    if options.replicate_to:
        from .replication.node import Replication

        return NSQD(options, replication=Replication, **kwargs)
    return NSQD(options, **kwargs)
