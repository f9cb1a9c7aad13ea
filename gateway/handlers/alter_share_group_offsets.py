"""AlterShareGroupOffsets (key 91), v0: new start offsets for a share group without members
(NON_EMPTY_GROUP otherwise; an unknown group is created, as Kafka does): each named
share-partition starts again at its offset with nothing in flight, stored before the
answer (``gateway/share``). ``kafka-share-groups.sh --reset-offsets``."""

from __future__ import annotations

import uuid
from typing import Any

from tidegate.gateway.groups.errors import NON_EMPTY_GROUP
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.share_group_heartbeat import offsets_refusal
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.share_group import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)

SPEC = ApiSpec(AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, 0, 0)

_Topic = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
_Partition = _Topic.AlterShareGroupOffsetsResponsePartition
_NO_ID = uuid.UUID(int=0)


def _error(code: int, message: str) -> Any:
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code,
                                          error_message=message, responses=[])


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    group_id = request.group_id
    failed = offsets_refusal(ctx, req, Operation.READ, group_id)
    if failed is not None:
        return _error(*failed)
    share = ctx.share_groups
    assert share is not None
    if not group_id:
        return _error(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
    groups = ctx.group_coordinator
    if groups is not None and (groups.group(group_id) is not None
                               or group_id in groups.consumer.groups):
        return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    if share.has_members(group_id):
        return _error(NON_EMPTY_GROUP, "The group has active members.")
    offsets: dict[tuple[str, int], int] = {}
    responses = []
    for t in request.topics:
        info = ctx.topics.get(t.topic_name)
        hidden = refusal(ctx.security, req.session, Operation.READ, ResourceType.TOPIC,
                         t.topic_name) is not None
        answers = []
        for p in t.partitions:
            code, message = ErrorCode.NONE, None
            if hidden:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p.partition_index < info.partitions:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition"
            elif p.start_offset < 0:
                code, message = ErrorCode.INVALID_REQUEST, f"start offset {p.start_offset} < 0"
            else:
                offsets[(t.topic_name, p.partition_index)] = p.start_offset
            answers.append(_Partition(partition_index=p.partition_index, error_code=code,
                                      error_message=message))
        responses.append(_Topic(topic_name=t.topic_name,
                                topic_id=info.topic_id if info is not None else _NO_ID,
                                partitions=answers))
    if offsets:
        try:
            await share.set_start_offsets(group_id, offsets)
        except OverflowError as exc:
            return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, str(exc))
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                          responses=responses)
