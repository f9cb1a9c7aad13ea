"""ShareGroupDescribe (key 77), v1: a share group's members and their assignments
(``gateway/share/coordinator.py``); a group this node does not know is GROUP_ID_NOT_FOUND."""

from __future__ import annotations

from typing import Any

from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.share_group_heartbeat import unserved
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.share_group import ShareGroupDescribeRequest, ShareGroupDescribeResponse

SPEC = ApiSpec(ShareGroupDescribeRequest, ShareGroupDescribeResponse, 1, 1)

_Group = ShareGroupDescribeResponse.DescribedGroup
_Member = _Group.Member
_Assignment = _Member.Assignment
_TopicPartitions = _Assignment.TopicPartitions
_NO_OPERATIONS = -(2**31)


def _failed(group_id: str, code: ErrorCode, message: str) -> Any:
    return _Group(error_code=code, error_message=message, group_id=group_id, group_state="Dead",
                  group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                  authorized_operations=_NO_OPERATIONS)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    share = ctx.share_groups
    out = []
    for group_id in request.group_ids:
        if share is None:
            out.append(_failed(group_id, *unserved(ctx)))
            continue
        # Kafka's rule: describing a group needs DESCRIBE on it (READ implies DESCRIBE).
        refused = refusal(ctx.security, req.session, Operation.DESCRIBE, ResourceType.GROUP,
                          group_id)
        if refused is not None:
            out.append(_failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, refused))
            continue
        group = share.describe(group_id)
        if group is None:
            out.append(_failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                               f"Group {group_id} not found."))
            continue
        members = []
        for m in group.members.values():
            parts = []
            for name, ps in sorted(m.assignment.items()):
                info = ctx.topics.get(name)
                if info is not None:
                    parts.append(_TopicPartitions(topic_id=info.topic_id, topic_name=name,
                                                  partitions=list(ps)))
            members.append(_Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
                assignment=_Assignment(topic_partitions=parts),
            ))
        out.append(_Group(
            error_code=0, error_message=None, group_id=group_id,
            group_state="Stable" if group.members else "Empty", group_epoch=group.epoch,
            assignment_epoch=group.epoch, assignor_name="simple", members=members,
            authorized_operations=_NO_OPERATIONS,
        ))
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=out)
