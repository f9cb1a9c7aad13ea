"""DeleteTopics (key 20): by name, and by topic id from v6. Each topic's stream is
sealed, its offset index, segment markers and producer state dropped, the stream
deleted through the controller, the topic forgotten, and the group coordinator told to
drop the topic's committed offsets.

Order and crashes: the topic is first marked as being deleted (it is then no longer
listed nor served); a restart finishes every marked deletion
(``gateway.handlers.admin_recovery``), so after a crash at any point the topic is
either whole or gone."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse
from tidegate.core.controller.api import ConflictError, StreamNotFoundError
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.log.compaction.cleaner import delete_clean_segments
from tidegate.gateway.log.topics import TopicInfo
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DeleteTopicsRequest, DeleteTopicsResponse, 0, 6)

log = logging.getLogger(__name__)

_Result = DeleteTopicsResponse.DeletableTopicResult
_NO_ID = uuid.UUID(int=0)


async def delete_topic(ctx: HandlerContext, info: TopicInfo) -> None:
    scope = ctx.topics.scope
    if not info.deleting:
        info = replace(info, deleting=True)
        await ctx.topics.update(info)
    try:
        await ctx.controller.seal_stream(scope, info.name)
    except StreamNotFoundError:
        pass
    # A compacted topic's clean segments are outside its stream (gateway/log/compaction).
    delete_clean = await delete_clean_segments(
        ctx.topics, ctx.index, ctx.store, info.name, info.partitions)
    # Appends in flight fail on the sealed segments; those still settling write nothing
    # to the index once the logs are dropped (``PartitionLog.retired``).
    await ctx.logs.retire_topic(info.name)
    await delete_clean()
    try:
        await ctx.controller.delete_stream(scope, info.name)
    except StreamNotFoundError:
        pass
    await ctx.topics.forget(info.name)
    ctx.logs.delete_topic(info.name)  # again: a Produce may have opened a log meanwhile
    await ctx.groups.remove_topic_offsets([info.name])


def _find(ctx: HandlerContext, name: str | None, topic_id: uuid.UUID) -> TopicInfo | None:
    if name is not None:
        return ctx.topics.get(name)
    for n in ctx.topics.names():
        info = ctx.topics.get(n)
        if info is not None and info.topic_id == topic_id:
            return info
    return None


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    if req.api_version >= 6:
        wanted = [(t.name, t.topic_id or _NO_ID) for t in request.topics]
    else:
        wanted = [(name, _NO_ID) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        info = _find(ctx, name, topic_id)
        if info is None:
            unknown_id = name is None
            code = ErrorCode.UNKNOWN_TOPIC_ID if unknown_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results.append(_Result(name=name, topic_id=topic_id, error_code=code,
                                   error_message="This server does not host this topic."))
            continue
        try:
            await delete_topic(ctx, info)
        except ConflictError as exc:  # a scale or truncation holds the stream: retriable
            results.append(_Result(name=info.name, topic_id=info.topic_id,
                                   error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc)))
            continue
        except Exception as exc:  # a full disk (store, controller or RocksDB errors)
            # Marked for deletion already (unless the mark itself failed): the next
            # start finishes it; a retry now may too.
            log.error("deleting topic %s failed: %r", info.name, exc)
            results.append(_Result(name=info.name, topic_id=info.topic_id,
                                   error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                                   error_message=f"deleting the topic failed: {exc}"))
            continue
        log.info("topic %s deleted", info.name)
        results.append(_Result(name=info.name, topic_id=info.topic_id,
                               error_code=ErrorCode.NONE, error_message=None))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
