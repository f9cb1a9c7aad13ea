"""Create a stream: metadata (state ``CREATING``, config, epoch 0), its segments in the
segment store, then state ``ACTIVE``.

The request is first recorded in the scope's stream index (``stream/<name>`` ->
``{"create": request}``), which is also what makes the name taken; the index entry
becomes ``null`` when the stream is active. ``start()`` resumes every entry still holding
a request. In cluster mode the request carries the first segments' numbers, chosen so
their containers' owners spread over the nodes (``placement.py``): a controller that
resumes a half-done create makes the same segments, whatever the map is then. Without
numbers (one node, or a request recorded before them) segment ``i`` of epoch 0 is the
``i``-th range."""

from __future__ import annotations

from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    KeyRange,
    SegmentRecord,
    StreamConfig,
    StreamExistsError,
    StreamState,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.metadata import StreamMeta, epoch_key
from tidegate.core.controller.placement import spreading
from tidegate.core.controller.records import Json, config_from_json, config_to_json, epoch_to_json
from tidegate.core.controller.workflows.base import Context, create_segment, each, finish
from tidegate.core.segmentstore.api import NOT_EXISTS


def request(
    config: StreamConfig, ranges: list[KeyRange], time_ms: int, numbers: list[int] | None = None
) -> Json:
    req: Json = {
        "config": config_to_json(config),
        "ranges": [[r.start, r.end] for r in ranges],
        "time": time_ms,
    }
    if numbers is not None:
        if len(numbers) != len(ranges) or numbers != sorted(set(numbers)) or numbers[-1] > 0xFFFFFFFF:
            raise AssertionError(f"create: segment numbers {numbers} not distinct and increasing")
        req["numbers"] = numbers
    return req


def first_numbers(ctx: Context, scope: str, stream: str, count: int) -> list[int] | None:
    """The numbers of a new stream's ``count`` segments in cluster mode (spread over the
    nodes), ``None`` on one node (``0..count-1``)."""
    if ctx.placement is None or count == 0:
        return None
    return spreading(ctx.placement, scope, stream)(0, 0, [], [], count)


def initial_epoch(req: Json) -> EpochRecord:
    t = req["time"]
    numbers = req.get("numbers") or range(len(req["ranges"]))
    segs = [
        SegmentRecord(segment_id(0, n), t, float(a), float(b))
        for n, (a, b) in zip(numbers, req["ranges"], strict=True)
    ]
    return EpochRecord(0, t, tuple(sorted(segs, key=lambda s: s.key_start)))


async def claim(ctx: Context, scope: str, stream: str, req: Json) -> None:
    """Take the name; ``StreamExistsError`` if it is taken."""
    try:
        await ctx.md.put(
            ctx.md.scope_table(scope),
            {f"stream/{stream}": {"create": req}},
            expected={f"stream/{stream}": NOT_EXISTS},
        )
    except ConflictError as e:
        raise StreamExistsError(f"stream {scope}/{stream} exists") from e


async def steps(ctx: Context, scope: str, stream: str, req: Json) -> None:
    meta = StreamMeta(ctx.md, scope, stream)
    config = config_from_json(req["config"])
    await ctx.md.ensure_table(meta.table)
    state = await meta.get("state")
    if state is None:
        epoch = initial_epoch(req)
        await meta.put(
            {
                "config": req["config"],
                "created": req["time"],
                epoch_key(0): epoch_to_json(epoch),
                "current_epoch": 0,
                "state": StreamState.CREATING.value,
                "workflow": {"type": "create"},
                "txn_order": 0,
            },
            expected={"state": NOT_EXISTS},
        )
        state = await meta.get("state")
    assert state is not None
    if state.value == StreamState.CREATING.value:
        await each(
            create_segment(ctx.store, qualified_segment_name(scope, stream, s.id))
            for s in (await meta.epoch(0)).segments
        )
        if config.tags:
            await ctx.md.put(
                ctx.md.scope_table(scope), {f"tag/{t}/{stream}": None for t in config.tags}
            )
        await finish(meta, StreamState.ACTIVE)
    await ctx.md.put(ctx.md.scope_table(scope), {f"stream/{stream}": None})
