"""Scale a stream: seal some segments of the current epoch and create successors for
new key ranges that cover exactly the sealed ones.

Steps: validate; record ``{"type": "scale", "epoch": <new epoch record>, "seal": ids}``
with ``ACTIVE -> SCALING``; create the new segments; seal the old ones; then in one
update write the new epoch, make it current, record the sealed sizes and go back to
``ACTIVE``. The new epoch is not visible to readers or writers until that last update,
so a crash anywhere before it leaves the stream on the old epoch until ``start()`` runs
the remaining steps (every one idempotent) and completes the scale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    InvalidArgumentError,
    KeyRange,
    SegmentRecord,
    StreamState,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.history import History
from tidegate.core.controller.keyspace import check_cover, check_range, merged
from tidegate.core.controller.metadata import StreamMeta, epoch_key, seg_key
from tidegate.core.controller.placement import NumberChooser, sequential, spreading
from tidegate.core.controller.records import Json, SealedRecord, epoch_from_json, epoch_to_json
from tidegate.core.controller.workflows.base import (
    Context,
    begin,
    create_segment,
    each,
    finish,
    history,
)


def plan(
    h: History, sealed: Sequence[int], new_ranges: Sequence[KeyRange], time_ms: int,
    choose: NumberChooser = sequential,
) -> EpochRecord:
    """The epoch that follows the current one after this scale, or ``InvalidArgumentError``
    / ``ConflictError`` (segments that were active once but are sealed now) if the
    request cannot be applied. ``choose`` numbers the new segments (``placement.py``)."""
    if not sealed:
        raise InvalidArgumentError("scale: no segments to seal")
    if not new_ranges:
        raise InvalidArgumentError("scale: no new key ranges")
    if len(set(sealed)) != len(sealed):
        raise InvalidArgumentError("scale: a segment is named twice")
    current = h.current
    live = {s.id: s for s in current.segments}
    for seg in sealed:
        if seg not in live:
            if seg in h.segments:
                raise ConflictError(f"scale: segment {seg} is already sealed")
            raise InvalidArgumentError(f"scale: segment {seg} is not part of the stream")
    for r in new_ranges:
        if not isinstance(r, KeyRange):
            raise InvalidArgumentError(f"scale: key range expected, not {r!r}")
        check_range(r)
    old_union = merged((live[s].key_start, live[s].key_end) for s in sealed)
    new_union = merged((r.start, r.end) for r in new_ranges)
    if old_union != new_union:
        raise InvalidArgumentError(
            f"scale: new key ranges cover {new_union}, the sealed segments cover {old_union}"
        )
    epoch = current.epoch + 1
    first = max(s & 0xFFFFFFFF for s in h.segments) + 1
    sealed_ids = set(sealed)
    kept = [s for s in current.segments if s.id not in sealed_ids]
    numbers = choose(epoch, first, [s.id for s in kept], list(sealed), len(new_ranges))
    if len(numbers) != len(new_ranges) or numbers != sorted(set(numbers)) or numbers[0] < first:
        raise AssertionError(f"scale: segment numbers {numbers} not new and increasing")
    if numbers[-1] > 0xFFFFFFFF:
        raise ConflictError("scale: the stream has used every segment number")
    created = [
        SegmentRecord(segment_id(epoch, n), time_ms, r.start, r.end)
        for n, r in zip(numbers, new_ranges, strict=True)
    ]
    segments = tuple(sorted(kept + created, key=lambda s: s.key_start))
    check_cover([s.key_range for s in segments], f"epoch {epoch}")
    return EpochRecord(epoch, time_ms, segments)


def _planned(
    h: History, sealed: Sequence[int], new_ranges: Sequence[KeyRange], time_ms: int,
    choose: NumberChooser,
) -> tuple[EpochRecord, Json]:
    epoch = plan(h, sealed, new_ranges, time_ms, choose)
    return epoch, {"type": "scale", "epoch": epoch_to_json(epoch), "seal": list(sealed)}


async def start(
    ctx: Context, meta: StreamMeta, sealed: Sequence[int], new_ranges: Sequence[KeyRange]
) -> EpochRecord:
    state, _ = await meta.state()
    if state != StreamState.ACTIVE:
        raise ConflictError(f"stream {meta.name} is {state.value}; it cannot scale")
    h = await history(meta)
    # Planned in a worker thread: thousands of segments take long enough on the event loop
    # to stall every other request; the history is immutable and nothing else changes
    # the stream meanwhile (its state is checked again by ``begin``'s versioned write).
    # The successors' numbers are chosen here and recorded with the epoch: a controller
    # that finishes this scale later creates the same segments, whatever the map is then.
    choose: NumberChooser = sequential
    if ctx.placement is not None:
        choose = spreading(ctx.placement, meta.scope, meta.stream)
    epoch, record = await asyncio.to_thread(
        _planned, h, sealed, new_ranges, ctx.now_ms(), choose
    )
    await begin(meta, StreamState.SCALING, record)
    await steps(ctx, meta, record)
    return epoch


async def steps(ctx: Context, meta: StreamMeta, record: Json) -> None:
    epoch = await asyncio.to_thread(epoch_from_json, record["epoch"])

    def name(seg: int) -> str:
        return qualified_segment_name(meta.scope, meta.stream, seg)

    await each(
        create_segment(ctx.store, name(s.id)) for s in epoch.segments if s.epoch == epoch.epoch
    )
    results: dict[str, Json] = {}
    sizes = await each(ctx.store.seal(name(seg)) for seg in record["seal"])
    for seg, size in zip(record["seal"], sizes, strict=True):
        results[seg_key("sealed", seg)] = SealedRecord(size, epoch.epoch).to_json()
    results[epoch_key(epoch.epoch)] = record["epoch"]
    results["current_epoch"] = epoch.epoch
    await finish(meta, StreamState.ACTIVE, results)
    await ctx.md.remove(meta.table, [seg_key("cold", seg) for seg in record["seal"]])
