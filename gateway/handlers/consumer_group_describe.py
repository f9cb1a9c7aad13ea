"""ConsumerGroupDescribe (key 69), v0-1: KIP-848 groups with their epochs, assignor
and each member's current and target assignment (v1: member type, classic or consumer:
a consumer group keeps classic members after an online upgrade). A classic group is
GROUP_ID_NOT_FOUND, as in Kafka 4.0, which sends the admin client to DescribeGroups. Authorized operations are not computed (no ACLs)."""

from __future__ import annotations

from typing import Any

from tidegate.gateway.groups.consumer_model import Assignment
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.acls import ResourceType
from tidegate.gateway.security.operations import NOT_REQUESTED, as_bits, authorized
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 1)

_Group = ConsumerGroupDescribeResponse.DescribedGroup
_Member = _Group.Member
_Assignment = _Member.Assignment
_TopicPartitions = _Assignment.TopicPartitions
#: KIP-1099's member types: a member speaking the classic protocol (in a consumer group
#: after an online upgrade) and one speaking the consumer protocol.
_CLASSIC_MEMBER = 0
_CONSUMER_MEMBER = 1


def _assignment(ctx: HandlerContext, a: Assignment) -> Any:
    parts = []
    for name, ps in sorted(a.items()):
        info = ctx.topics.get(name)
        if info is not None and ps:
            parts.append(_TopicPartitions(topic_id=info.topic_id, topic_name=name, partitions=sorted(ps)))
    return _Assignment(topic_partitions=parts)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    if ctx.group_coordinator is None:  # cluster mode: another node has the groups now
        described: list[tuple[str, int, str | None, Any]] = [
            (gid, ErrorCode.NOT_COORDINATOR, None, None) for gid in request.group_ids
        ]
    else:
        described = list(ctx.groups.describe_consumer_groups(list(request.group_ids)))
    groups = []
    asked = bool(request.include_authorized_operations)
    for gid, error, message, g in described:
        if g is None:
            groups.append(
                _Group(
                    error_code=error, error_message=message, group_id=gid, group_state="",
                    group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                    authorized_operations=NOT_REQUESTED,
                )
            )
            continue
        members = [
            _Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_names),
                subscribed_topic_regex=m.subscribed_regex,
                assignment=_assignment(ctx, m.assigned),
                target_assignment=_assignment(ctx, g.target.get(m.member_id, {})),
                member_type=_CONSUMER_MEMBER if m.classic is None else _CLASSIC_MEMBER,
            )
            for m in g.members.values()
        ]
        groups.append(
            _Group(
                error_code=0, error_message=None, group_id=gid, group_state=g.state.value,
                group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                assignor_name=g.assignor, members=members,
                authorized_operations=as_bits(
                    authorized(ctx.security, req.session, ResourceType.GROUP, gid)
                ) if asked else NOT_REQUESTED,
            )
        )
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)
