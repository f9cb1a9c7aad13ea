"""DescribeProducers (key 61, KIP-664), v0: the producers each partition knows (id,
epoch, last sequence) and the first offset of each one's open transaction. Last
timestamps are not kept (-1); the coordinator epoch is 0 (one coordinator)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext, lead_error
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeProducersRequest, DescribeProducersResponse, 0, 0)

_Topic = DescribeProducersResponse.TopicResponse
_Partition = _Topic.PartitionResponse
_Producer = _Partition.ProducerState


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    txns = ctx.partition_txns
    topics = []
    for t in request.topics:
        info = ctx.topics.get(t.name)
        parts = []
        for p in t.partition_indexes:
            if info is None or not 0 <= p < info.partitions:
                parts.append(_Partition(
                    partition_index=p, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=None, active_producers=[],
                ))
                continue
            error = await lead_error(ctx, t.name, p)
            if error:
                parts.append(_Partition(partition_index=p, error_code=error, error_message=None,
                                        active_producers=[]))
                continue
            open_txns = txns.open_transactions(t.name, p) if txns is not None else {}
            producers = [
                _Producer(
                    producer_id=pid, producer_epoch=epoch, last_sequence=last_seq,
                    last_timestamp=-1, coordinator_epoch=0,
                    current_txn_start_offset=open_txns.get(pid, -1),
                )
                for pid, epoch, last_seq in ctx.producers.producers(t.name, p)
            ]
            parts.append(_Partition(
                partition_index=p, error_code=0, error_message=None, active_producers=producers,
            ))
        topics.append(_Topic(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
