"""ShareAcknowledge (key 79), v1-2: acknowledgements outside a fetch (KIP-932), in the
member's share session (its epoch checked and moved on; -1 closes it after the
acknowledgements and releases what the member still holds). The share-partitions are
stored before the answer, so an accepted record is never delivered again."""

from __future__ import annotations

from typing import Any

from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.share_fetch import FINAL_EPOCH, close_session, session_for
from tidegate.gateway.handlers.share_group_heartbeat import member_refusal, member_share
from tidegate.gateway.share import reading
from tidegate.gateway.share.reading import SharePart
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.share_group import ShareAcknowledgeRequest, ShareAcknowledgeResponse

SPEC = ApiSpec(ShareAcknowledgeRequest, ShareAcknowledgeResponse, 1, 2)

_Topic = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
_Partition = _Topic.PartitionData
_Leader = _Partition.LeaderIdAndEpoch


def _error(code: ErrorCode, message: str | None) -> Any:
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                    acquisition_lock_timeout_ms=0, responses=[],
                                    node_endpoints=[])


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    group_id, member_id = request.group_id or "", request.member_id or ""
    failed = member_refusal(ctx, req, group_id, member_id)
    if failed is not None:
        return _error(*failed)
    share = member_share(ctx)
    assert share is not None
    session, code, message = session_for(share, group_id, member_id,
                                         request.share_session_epoch, False)
    if session is None:
        return _error(code, message)
    parts: list[SharePart] = []
    changed: dict[tuple[str, int], SharePart] = {}
    for t in request.topics:
        for p in t.partitions:
            part = SharePart(t.topic_id, p.partition_index)
            parts.append(part)
            plog = None
            if reading.resolve(ctx, req, part):
                plog = await reading.lead(ctx, share, group_id, part)
            if reading.acknowledge(share, group_id, member_id, part, plog,
                                   p.acknowledgement_batches) and plog is not None:
                changed[(plog.topic, plog.partition)] = part
    if changed:
        for tp in await share.persist(group_id, changed):
            changed[tp].ack_error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            changed[tp].ack_message = "the share-partition moved; its records come again"
    if request.share_session_epoch == FINAL_EPOCH:
        close_session(share, session)
    out: dict[Any, list[Any]] = {}
    for part in parts:
        out.setdefault(part.topic_id, []).append(_Partition(
            partition_index=part.partition, error_code=part.ack_error or ErrorCode.NONE,
            error_message=part.ack_message,
            current_leader=_Leader(leader_id=part.leader_id, leader_epoch=part.leader_epoch),
        ))
    return ShareAcknowledgeResponse(
        throttle_time_ms=0, error_code=0, error_message=None,
        acquisition_lock_timeout_ms=share.lock_duration_ms(group_id),
        responses=[_Topic(topic_id=t, partitions=ps) for t, ps in out.items()],
        node_endpoints=reading.endpoints(ctx, req, parts, ShareAcknowledgeResponse.NodeEndpoint),
    )
