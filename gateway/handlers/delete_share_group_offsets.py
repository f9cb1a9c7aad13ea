"""DeleteShareGroupOffsets (key 92), v0: a share group without members forgets its state
of whole topics (the next fetch starts them by ``share.auto.offset.reset``); a topic the
group has no state for is UNKNOWN_TOPIC_OR_PARTITION (``gateway/share``)."""

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
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)

SPEC = ApiSpec(DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, 0, 0)

_Topic = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic
_NO_ID = uuid.UUID(int=0)


def _error(code: int, message: str) -> Any:
    return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code,
                                           error_message=message, responses=[])


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    group_id = request.group_id
    failed = offsets_refusal(ctx, req, Operation.DELETE, group_id)
    if failed is not None:
        return _error(*failed)
    share = ctx.share_groups
    assert share is not None
    if not share.is_share_group(group_id):
        return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    if share.has_members(group_id):
        return _error(NON_EMPTY_GROUP, "The group has active members.")
    names = {t.topic_name for t in request.topics}
    allowed = {n for n in names if refusal(ctx.security, req.session, Operation.READ,
                                           ResourceType.TOPIC, n) is None}
    found = await share.forget_topics(group_id, allowed)
    responses = []
    for name in sorted(names):
        info = ctx.topics.get(name)
        code, message = ErrorCode.NONE, None
        if name not in allowed:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif name not in found:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the group has no state for it"
        responses.append(_Topic(topic_name=name,
                                topic_id=info.topic_id if info is not None else _NO_ID,
                                error_code=code, error_message=message))
    return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                           responses=responses)
