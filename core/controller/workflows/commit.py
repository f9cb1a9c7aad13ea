"""Commit transactions marked ``COMMITTING``, one at a time in commit order.

A transaction whose parent segments are all still in the current epoch is committed by
merging each shadow segment into its parent (record ``{"type": "commit", "txn": id}``;
the stream stays ``ACTIVE``).

Otherwise the stream scaled since the transaction began, and it is rolled over (Pravega's
rolling transactions), with ``ACTIVE -> SCALING``: with current epoch ``E``, epoch
``E+1`` holds fresh duplicates of the transaction's epoch segments (same key ranges),
into which the shadow segments are merged and which are then sealed, and epoch ``E+2``
holds fresh duplicates of ``E``'s segments. ``E``'s segments are sealed first, so the
transaction's data follows everything written before the commit and precedes everything
written after it, and each epoch still covers ``[0, 1)``. Both new epochs become visible
in the workflow's final update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    SegmentRecord,
    StreamState,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.history import History
from tidegate.core.controller.metadata import StreamMeta, epoch_key, seg_key
from tidegate.core.controller.records import (
    Json,
    SealedRecord,
    TxnRecord,
    TxnState,
    epoch_from_json,
    epoch_to_json,
)
from tidegate.core.controller.workflows.base import (
    Context,
    begin,
    create_segment,
    each,
    finish,
    txn_segment_name,
)
from tidegate.core.segmentstore.api import SegmentNotFoundError, SegmentStore


async def marked(ctx: Context, meta: StreamMeta) -> list[TxnRecord]:
    recs = [TxnRecord.from_json(v.value) for _, v in await ctx.md.entries(meta.table, "txn/")]
    return sorted((r for r in recs if r.state == TxnState.COMMITTING), key=lambda r: r.commit_order)


async def commit_marked(ctx: Context, meta: StreamMeta) -> None:
    """Commit every marked transaction, in commit order. Only on an ``ACTIVE`` stream;
    on a sealed one they are aborted by the seal workflow."""
    for rec in await marked(ctx, meta):
        state, _ = await meta.state()
        if state != StreamState.ACTIVE:
            raise ConflictError(f"stream {meta.name} is {state.value}; cannot commit")
        await commit_one(ctx, meta, rec)


def roll_plan(h: History, rec: TxnRecord, time_ms: int) -> Json:
    """Duplicates keep their original's segment number (with the new epoch), as in
    Pravega, so a store that places segments by ``scope/stream/number`` keeps a shadow
    segment, its parent and the parent's duplicate in one container, and the merge is
    local."""
    cur = h.current
    parents = sorted((h.segments[p] for p in rec.segments), key=lambda s: s.key_start)

    def dups(epoch: int, of: Sequence[SegmentRecord]) -> EpochRecord:
        return EpochRecord(
            epoch,
            time_ms,
            tuple(
                SegmentRecord(segment_id(epoch, s.number), time_ms, s.key_start, s.key_end)
                for s in of
            ),
        )

    dup = dups(cur.epoch + 1, parents)
    nxt = dups(cur.epoch + 2, cur.segments)
    return {
        "dup": epoch_to_json(dup),
        "next": epoch_to_json(nxt),
        "parents": {str(p.id): d.id for p, d in zip(parents, dup.segments, strict=True)},
    }


async def commit_one(ctx: Context, meta: StreamMeta, rec: TxnRecord) -> None:
    h = History(await meta.epochs())
    live = {s.id for s in h.current.segments}
    record: Json = {"type": "commit", "txn": rec.id}
    if all(p in live for p in rec.segments):
        await begin(meta, None, record)
    else:
        record["roll"] = roll_plan(h, rec, ctx.now_ms())
        await begin(meta, StreamState.SCALING, record)
    await steps(ctx, meta, record)


async def merge(store: SegmentStore, target: str, source: str) -> None:
    """Merge ``source`` into ``target``; a missing source was merged already."""
    try:
        await store.merge(target, source)
    except SegmentNotFoundError as e:
        if e.segment != source:
            raise


async def steps(ctx: Context, meta: StreamMeta, record: Json) -> None:
    v = await meta.get(f"txn/{record['txn']}")
    assert v is not None, record
    rec = TxnRecord.from_json(v.value)

    def name(seg: int) -> str:
        return qualified_segment_name(meta.scope, meta.stream, seg)

    def shadow(parent: int) -> str:
        return txn_segment_name(meta.scope, meta.stream, parent, rec.id)

    done = replace(rec, state=TxnState.COMMITTED, completed_ms=ctx.now_ms())
    results: dict[str, Json] = {f"txn/{rec.id}": done.to_json()}
    roll = record.get("roll")
    if roll is None:
        await each(merge(ctx.store, name(p), shadow(p)) for p in rec.segments)
        await finish(meta, None, results)
        return
    dup, nxt = epoch_from_json(roll["dup"]), epoch_from_json(roll["next"])
    await each(create_segment(ctx.store, name(s.id)) for s in dup.segments + nxt.segments)
    cur = await meta.epoch(dup.epoch - 1)
    sizes = await each(ctx.store.seal(name(s.id)) for s in cur.segments)
    for s, size in zip(cur.segments, sizes, strict=True):
        results[seg_key("sealed", s.id)] = SealedRecord(size, dup.epoch).to_json()
    await each(merge(ctx.store, name(d), shadow(int(p))) for p, d in roll["parents"].items())
    sizes = await each(ctx.store.seal(name(s.id)) for s in dup.segments)
    for s, size in zip(dup.segments, sizes, strict=True):
        results[seg_key("sealed", s.id)] = SealedRecord(size, nxt.epoch).to_json()
    results[epoch_key(dup.epoch)] = roll["dup"]
    results[epoch_key(nxt.epoch)] = roll["next"]
    results["current_epoch"] = nxt.epoch
    await finish(meta, StreamState.ACTIVE, results)
