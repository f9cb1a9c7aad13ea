"""Delete a sealed stream: ``SEALED -> DELETING``, mark the scope's index entry, delete
every segment the stream still has (stream and transaction segments), its tag index
entries and its table, then the index entry. ``start()`` resumes any index entry marked
``{"delete": true}``, whether or not the stream's table still exists."""

from __future__ import annotations

from tidegate.core.controller.api import ConflictError, StreamState, qualified_segment_name
from tidegate.core.controller.history import History
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.controller.records import TxnRecord, TxnState
from tidegate.core.controller.workflows.base import (
    Context,
    begin,
    delete_segment,
    each,
    txn_segment_name,
)
from tidegate.core.segmentstore.api import SegmentNotFoundError


async def start(ctx: Context, meta: StreamMeta) -> None:
    state, _ = await meta.state()
    if state not in (StreamState.SEALED, StreamState.DELETING):
        raise ConflictError(
            f"stream {meta.name} is {state.value}; only a sealed stream may be deleted"
        )
    if state == StreamState.SEALED:
        await begin(meta, StreamState.DELETING, {"type": "delete"})
    await steps(ctx, meta.scope, meta.stream)


async def steps(ctx: Context, scope: str, stream: str) -> None:
    scope_table = ctx.md.scope_table(scope)
    await ctx.md.put(scope_table, {f"stream/{stream}": {"delete": True}})
    meta = StreamMeta(ctx.md, scope, stream)
    try:
        history = History(await meta.epochs())
        truncation = await meta.truncation()
        config = await meta.config()
        txns = [TxnRecord.from_json(v.value) for _, v in await ctx.md.entries(meta.table, "txn/")]
    except SegmentNotFoundError:
        pass  # the table is gone already: only the index entry is left
    else:
        gone = history.before(truncation.cut) if truncation else set()
        names = [
            qualified_segment_name(scope, stream, s) for s in history.segments if s not in gone
        ]
        for t in txns:
            if t.state not in (TxnState.COMMITTED, TxnState.ABORTED):
                names += [txn_segment_name(scope, stream, p, t.id) for p in t.segments]
        await each(delete_segment(ctx.store, n) for n in names)
        await ctx.md.remove(scope_table, [f"tag/{t}/{stream}" for t in config.tags])
        await ctx.md.drop_table(meta.table)
    await ctx.md.remove(scope_table, [f"stream/{stream}"])
