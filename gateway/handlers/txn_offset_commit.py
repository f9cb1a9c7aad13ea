"""TxnOffsetCommit (key 28), v0-5: offsets held in the transaction and made the group's
only when it commits. v3+ carry the consumer's generation and member id, checked as the
group coordinator checks a commit (KIP-447), so a zombie of an older generation is
fenced. v5 is transaction version 2 (KIP-890): the commit adds its group to the
transaction itself, with no AddOffsetsToTxn before it."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from tidegate.gateway.groups.errors import OFFSET_METADATA_TOO_LARGE
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.state import PendingOffset
from tidegate.gateway.txn.wiring import coordinator_of, for_version
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 5)
#: The first TxnOffsetCommit version of transaction version 2.
TV2_VERSION = 5

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Partition = _Topic.TxnOffsetCommitResponsePartition


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    errors: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], PendingOffset] = {}
    order: list[tuple[str, int]] = []
    metadata_max = ctx.groups.config.offset_metadata_bytes_max
    for t in request.topics:
        info = ctx.topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if info is None or not 0 <= p.partition_index < info.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            epoch = p.committed_leader_epoch if v >= 2 else -1
            metadata = p.committed_metadata or ""
            if len(metadata.encode()) > metadata_max:  # as OffsetCommit checks it
                errors[tp] = OFFSET_METADATA_TOO_LARGE
                continue
            offsets[tp] = PendingOffset(p.committed_offset, epoch, metadata)
    if offsets:
        try:
            error = await coordinator_of(ctx).txn_offset_commit(
                request.transactional_id, request.producer_id, request.producer_epoch,
                request.group_id,
                request.generation_id if v >= 3 else -1,
                request.member_id if v >= 3 else "",
                request.group_instance_id if v >= 3 else None,
                offsets, implicit=v >= TV2_VERSION,
            )
        except Exception:  # the coordinator's table cannot be written: the client retries
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = for_version(error, v, 3)
        errors.update(dict.fromkeys(offsets, error))
    topics: dict[str, list[Any]] = {}
    for tp in order:
        topics.setdefault(tp[0], []).append(_Partition(partition_index=tp[1], error_code=errors[tp]))
    return TxnOffsetCommitResponse(
        throttle_time_ms=0, topics=[_Topic(name=n, partitions=ps) for n, ps in topics.items()]
    )
