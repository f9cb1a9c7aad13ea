"""Seal a stream: ``ACTIVE -> SEALING``, abort every transaction still pending (none can
be committed into a sealed stream), seal the current epoch's segments and record their
sizes, ``-> SEALED``. Sealing a sealed stream does nothing."""

from __future__ import annotations

from tidegate.core.controller.api import StreamState, qualified_segment_name
from tidegate.core.controller.metadata import StreamMeta, seg_key
from tidegate.core.controller.records import Json, SealedRecord, TxnRecord, TxnState
from tidegate.core.controller.workflows import abort
from tidegate.core.controller.workflows.base import Context, begin, each, finish

#: ``SealedRecord.sealed_epoch`` of the segments sealed with the stream itself.
STREAM_SEALED = -1


async def start(ctx: Context, meta: StreamMeta) -> None:
    state, _ = await meta.state()
    if state == StreamState.SEALED:
        return
    await begin(meta, StreamState.SEALING, {"type": "seal"})
    await steps(ctx, meta)


async def steps(ctx: Context, meta: StreamMeta) -> None:
    for _, v in await ctx.md.entries(meta.table, "txn/"):
        rec = TxnRecord.from_json(v.value)
        if rec.state not in (TxnState.COMMITTED, TxnState.ABORTED):
            await abort.steps(ctx, meta, rec)
    sealed: dict[str, Json] = {}
    segments = (await meta.current_epoch()).segments
    sizes = await each(
        ctx.store.seal(qualified_segment_name(meta.scope, meta.stream, s.id)) for s in segments
    )
    for s, size in zip(segments, sizes, strict=True):
        sealed[seg_key("sealed", s.id)] = SealedRecord(size, STREAM_SEALED).to_json()
    await finish(meta, StreamState.SEALED, sealed)
