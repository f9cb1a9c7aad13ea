"""A replicated log's failover: what it does once a server of a plog it writes failed.

``seal_and_switch`` runs under the chain's lock:

1. Each plog the owner writes (the active one, and one being switched away from) is
   sealed at the smallest end its reachable servers hold, unless all its servers are
   healthy and hold everything sent to it. Every acknowledged entry was on all of a
   plog's servers, so it lies below that end. The first plog that ends short of what was
   sent to it abandons the later ones: their entries are sent again.
2. A fresh plog on healthy servers: a spare, or a new one.
3. One conditional write records the seals, drops the spares used or abandoned, and
   appends the fresh plog to the chain. Until then nothing above a seal is acknowledged.

The log then acknowledges the entries below the seals and re-sends the rest to the
fresh plog, in order (``log.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from tidegate.core.segmentstore.tier1.replicated.chain import Chain
from tidegate.core.segmentstore.tier1.replicated.meta import LogMeta, PlogRecord, Spare
from tidegate.core.segmentstore.tier1.replicated.replicas import Replicas


class InUse(Protocol):
    """A plog the owner writes, as the failover sees it."""

    @property
    def index(self) -> int: ...

    @property
    def id(self) -> str: ...

    @property
    def servers(self) -> list[str]: ...

    @property
    def sent(self) -> int: ...

    @property
    def recorded(self) -> bool: ...

    def ack_end(self) -> int: ...


S = TypeVar("S", bound=InUse)


@dataclass
class Switch(Generic[S]):
    #: The plogs kept, each with the end it was sealed (and is now recorded) at.
    kept: list[tuple[S, int]]
    #: Plogs after the first one sealed short: never recorded, to be deleted.
    abandoned: list[S]
    fresh: Spare
    index: int


def healthy(replicas: Replicas, servers: list[str]) -> bool:
    return not any(replicas.is_suspect(s) for s in servers)


async def seal_and_switch(
    in_use: Sequence[S],
    spares: list[Spare],
    replicas: Replicas,
    chain: Chain,
    epoch: int,
    new_plog: Callable[[], Awaitable[Spare]],
    before_record: Callable[[], Awaitable[None]] | None = None,
) -> Switch[S]:
    """Steps 1-3 above; a spare it takes is removed from ``spares``. Hold the chain's
    lock. ``TooFewServersError`` when no fresh plog can be made (nothing is recorded)."""
    kept: list[tuple[S, int]] = []
    abandoned: list[S] = []
    for k, seg in enumerate(in_use):
        if healthy(replicas, seg.servers) and seg.ack_end() >= seg.sent:
            end = seg.sent
        else:
            end = await replicas.seal_min(seg.id, seg.servers, epoch)
        kept.append((seg, end))
        if end < seg.sent:
            abandoned = list(in_use[k + 1 :])
            break
    if before_record is not None:
        await before_record()
    fresh = next((s for s in spares if healthy(replicas, s.servers)), None)
    if fresh is not None:
        spares.remove(fresh)
    else:
        fresh = await new_plog()
    index = kept[-1][0].index + 1
    dropped = {s.id for s in abandoned} | {fresh.id} | {seg.id for seg, _ in kept}
    recorded = [(seg.index, seg.id, list(seg.servers), seg.recorded, end) for seg, end in kept]

    def record(m: LogMeta, fresh: Spare = fresh) -> None:
        for seg_index, seg_id, servers, was_recorded, end in recorded:
            if was_recorded:
                rec = next(p for p in m.plogs if p.index == seg_index)
                rec.end = end
            else:
                m.plogs.append(PlogRecord(seg_index, seg_id, servers, end))
        m.spares = [s for s in m.spares if s.id not in dropped]
        m.plogs.append(PlogRecord(index, fresh.id, fresh.servers, None))

    await chain.update(record)
    return Switch(kept, abandoned, fresh, index)
