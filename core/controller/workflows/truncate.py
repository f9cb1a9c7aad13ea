"""Truncate a stream at a StreamCut: delete every segment wholly before the cut and raise
the start offset of each cut segment to its offset.

Steps: validate (a valid cut, at or after the current truncation point, offsets within
the segments); record ``{"type": "truncate", "cut": ..., "delete": ids}`` with
``ACTIVE -> TRUNCATING``; delete the segments; truncate the cut's segments; then in one
update write the new truncation record and go back to ``ACTIVE``. Every step is
idempotent, so ``start()`` completes an interrupted truncate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    StreamCut,
    StreamState,
    qualified_segment_name,
)
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.controller.records import Json, TruncationRecord, cut_from_json, cut_to_json
from tidegate.core.controller.workflows.base import (
    EACH_WAVE,
    Context,
    begin,
    delete_segment,
    each,
    finish,
    history,
    truncate_segment,
)


async def start(ctx: Context, meta: StreamMeta, cut: StreamCut) -> None:
    state, _ = await meta.state()
    if state != StreamState.ACTIVE:
        raise ConflictError(f"stream {meta.name} is {state.value}; it cannot be truncated")
    h = await history(meta)
    h.check_cut(cut)
    old = await meta.truncation()
    if old is not None and not h.cut_ge(cut, old.cut):
        raise ConflictError("StreamCut is before the stream's current truncation point")
    sealed = await meta.sealed()
    for n, (seg, offset) in enumerate(cut.items()):
        if n % EACH_WAVE == EACH_WAVE - 1:
            await asyncio.sleep(0)  # a cut of thousands of segments: a loop step per wave
        if seg in sealed:
            length = sealed[seg].size
        else:
            info = await ctx.store.get_info(qualified_segment_name(meta.scope, meta.stream, seg))
            length = info.length
        if offset > length:
            raise InvalidArgumentError(
                f"StreamCut offset {offset} is past the end ({length}) of {seg}"
            )
    gone = h.before(old.cut) if old else set()
    record = {
        "type": "truncate",
        "cut": cut_to_json(cut),
        "delete": sorted(h.before(cut) - gone),
        "time": ctx.now_ms(),
    }
    await begin(meta, StreamState.TRUNCATING, record)
    await steps(ctx, meta, record)


async def steps(ctx: Context, meta: StreamMeta, record: Json) -> None:
    cut: Mapping[int, int] = cut_from_json(record["cut"])

    def name(seg: int) -> str:
        return qualified_segment_name(meta.scope, meta.stream, seg)

    await each(delete_segment(ctx.store, name(seg)) for seg in record["delete"])
    await each(truncate_segment(ctx.store, name(seg), offset) for seg, offset in cut.items())
    rec = TruncationRecord(cut=cut, time_ms=record["time"])
    await finish(meta, StreamState.ACTIVE, {"truncation": rec.to_json()})
