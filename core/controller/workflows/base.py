"""What every workflow shares: its context, the begin/finish records, and idempotent
forms of the segment-store calls it makes."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from tidegate.core.controller.api import ConflictError, StreamState, qualified_segment_name
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.history import History
from tidegate.core.controller.metadata import MetadataStore, StreamMeta
from tidegate.core.controller.placement import SegmentPlacement
from tidegate.core.controller.records import Json
from tidegate.core.controller.state import check_transition
from tidegate.core.segmentstore.api import SegmentExistsError, SegmentNotFoundError, SegmentStore

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Context:
    store: SegmentStore
    md: MetadataStore
    config: ControllerConfig
    now_ms: Callable[[], int]
    #: Cluster mode's container map: new segments go to different nodes.
    placement: SegmentPlacement | None = None


async def history(meta: StreamMeta) -> History:
    return History(await meta.epochs())


async def begin(meta: StreamMeta, new_state: StreamState | None, record: Json) -> None:
    """Record workflow ``record`` and move the stream to ``new_state`` (``None``: keep it)
    atomically. ``ConflictError`` if the transition is not allowed, another workflow is
    recorded, or another writer changed either key meanwhile."""
    state, state_version = await meta.state()
    wf = await meta.workflow()
    if wf.value is not None:
        raise ConflictError(f"stream {meta.name} is busy with a {wf.value['type']} workflow")
    values: dict[str, Json] = {"workflow": record}
    if new_state is not None:
        check_transition(meta.name, state, new_state)
        values["state"] = new_state.value
    await meta.put(values, expected={"state": state_version, "workflow": wf.version})


async def finish(
    meta: StreamMeta, new_state: StreamState | None, values: Mapping[str, Json] | None = None
) -> None:
    """Write the workflow's results, the final state, and clear the workflow record, in
    one atomic update."""
    out: dict[str, Json] = dict(values or {})
    out["workflow"] = None
    if new_state is not None:
        out["state"] = new_state.value
    await meta.put(out)


#: Calls ``each`` runs at once: the event loop runs every ready task of a wave in one
#: pass, so thousands at once (a scale to 10,000 segments) stalled every connection.
EACH_WAVE = 128


async def each(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Run independent segment-store calls concurrently, ``EACH_WAVE`` at a time (the
    store orders them by arrival and group-commits them); results in the order given.
    If one fails, the calls of later waves are not started."""
    # Taken from ``calls`` one wave at a time: a generator then makes each wave's
    # coroutines only when it starts (ten thousand made at once are as many objects for
    # every garbage collection meanwhile to scan).
    pending = iter(calls)
    out: list[T] = []
    try:
        while wave := list(itertools.islice(pending, EACH_WAVE)):
            out += await asyncio.gather(*wave)
    except BaseException:
        for call in pending:
            close = getattr(call, "close", None)
            if close is not None:
                close()  # a coroutine never started: no "never awaited" warning
        raise
    return out


async def create_segment(store: SegmentStore, name: str) -> None:
    try:
        await store.create_segment(name)
    except SegmentExistsError:
        pass


async def delete_segment(store: SegmentStore, name: str) -> None:
    try:
        await store.delete_segment(name)
    except SegmentNotFoundError:
        pass


async def truncate_segment(store: SegmentStore, name: str, offset: int) -> None:
    """Raise the segment's start offset to ``offset`` unless it is there already."""
    info = await store.get_info(name)
    if info.start_offset < offset:
        await store.truncate(name, offset)


def txn_segment_name(scope: str, stream: str, parent: int, txn_id: str) -> str:
    """The segment store name of a transaction's shadow of segment ``parent``."""
    return f"{qualified_segment_name(scope, stream, parent)}#transaction.{txn_id}"
