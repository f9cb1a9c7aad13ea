"""CreatePartitions (key 37): raises a topic's partition count. New partitions are new
points in the key space (the bit-reversal of their numbers, so existing points never
move); every current segment that now holds a new point next to another is split by the
controller's ordinary scale into one segment per point, cut halfway between neighbouring
points, so each partition again has its own segment. The new count is stored first: a
partition is usable as soon as it exists (a segment may hold several), so a split that
fails (logged) costs placement, not correctness. A topic with a scaling policy is left
to the auto-scaler, which splits between points as partitions heat. Decreases and equal
counts are INVALID_PARTITIONS, as in Kafka."""

from __future__ import annotations

import asyncio
import bisect
import logging
from dataclasses import replace
from typing import Any

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse
from tidegate.core.controller.api import KeyRange, ScalingType, SegmentRecord
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.config_resources import ResourceError, update_stream_policy
from tidegate.gateway.handlers.create_topics import PARTITIONS_MAX
from tidegate.gateway.log import topic_config
from tidegate.gateway.log.topics import TopicInfo, partition_point
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(CreatePartitionsRequest, CreatePartitionsResponse, 0, 3)

log = logging.getLogger(__name__)

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def split_ranges(
    segments: list[SegmentRecord], old: int, new: int
) -> tuple[list[int], list[KeyRange]]:
    """The segments to seal and their successors' ranges: each segment holding one of
    the points of partitions ``old..new-1`` and some other point is cut into one range
    per point it holds. Points are sorted once and each segment's found by bisection:
    O((segments + partitions) log partitions), not their product."""
    by_point = sorted((partition_point(p), p) for p in range(new))
    points = [x for x, _ in by_point]
    sealed: list[int] = []
    ranges: list[KeyRange] = []
    for seg in segments:
        lo = bisect.bisect_left(points, seg.key_start)
        hi = bisect.bisect_left(points, seg.key_end)
        if hi - lo < 2 or all(p < old for _, p in by_point[lo:hi]):
            continue
        inside = points[lo:hi]
        cuts = [(a + b) / 2 for a, b in zip(inside, inside[1:], strict=False)]
        bounds = [seg.key_start, *cuts, seg.key_end]
        sealed.append(seg.id)
        ranges += [KeyRange(bounds[i], bounds[i + 1]) for i in range(len(inside))]
    return sealed, ranges


def _check(info: TopicInfo | None, name: str, topic: Any) -> tuple[ErrorCode, str] | None:
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
    if topic.count < info.partitions:
        return ErrorCode.INVALID_PARTITIONS, (
            f"Topic currently has {info.partitions} partitions, which is higher than the "
            f"requested {topic.count}.")
    if topic.count == info.partitions:
        return ErrorCode.INVALID_PARTITIONS, f"Topic already has {info.partitions} partitions."
    if topic.count > PARTITIONS_MAX:
        return ErrorCode.INVALID_PARTITIONS, f"{topic.count} partitions is above {PARTITIONS_MAX}"
    if topic.assignments is not None and len(topic.assignments) != topic.count - info.partitions:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
            f"Increasing the number of partitions by {topic.count - info.partitions} but "
            f"{len(topic.assignments)} assignments provided.")
    return None


async def add_partitions(ctx: HandlerContext, info: TopicInfo, count: int) -> None:
    old = info.partitions
    # Stored with the split still to do: a restart finishes it (admin_recovery).
    info = replace(info, partitions=count, splitting_from=old)
    await ctx.topics.update(info)
    await finish_split(ctx, info)


async def finish_split(ctx: HandlerContext, info: TopicInfo) -> None:
    """Split the segments for partitions ``info.splitting_from..info.partitions - 1``,
    adjust the retention policy, and clear the mark. Repeatable: what is split already
    is not split again."""
    old, count = info.splitting_from, info.partitions
    assert old is not None
    scope = ctx.topics.scope
    policy_old = topic_config.stream_config(info.configs, old)
    if policy_old.scaling.type == ScalingType.FIXED_NUM_SEGMENTS:
        try:
            current = await ctx.controller.get_current_segments(scope, info.name)
            # Off the event loop: for thousands of partitions it is long enough to stall
            # every connection (issue 22, finding 4).
            sealed, ranges = await asyncio.to_thread(split_ranges, current, old, count)
            if sealed:
                await ctx.controller.scale(scope, info.name, sealed, ranges)
        except Exception as exc:
            log.error("splitting the segments of %s for its new partitions: %r", info.name, exc)
    policy_new = topic_config.stream_config(info.configs, count)
    if policy_new != policy_old:  # size retention counts partitions
        await update_stream_policy(ctx, info.name, policy_new)
    await ctx.topics.update(replace(info, splitting_from=None))


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        if topic.name in seen:
            results.append(_Result(name=topic.name, error_code=ErrorCode.INVALID_REQUEST,
                                   error_message="Duplicate topic in request."))
            continue
        seen.add(topic.name)
        info = ctx.topics.get(topic.name)
        error = _check(info, topic.name, topic)
        if error is None and not request.validate_only:
            assert info is not None
            try:
                await add_partitions(ctx, info, topic.count)
            except ResourceError as exc:
                error = exc.code, str(exc)
        code, message = error if error is not None else (ErrorCode.NONE, None)
        results.append(_Result(name=topic.name, error_code=code, error_message=message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
