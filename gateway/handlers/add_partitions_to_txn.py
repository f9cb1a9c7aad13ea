"""AddPartitionsToTxn (key 24), v0-5. v0-3 (clients) add one transaction's partitions;
v4+ batch several transactions and may only verify (``verify_only``: KIP-890's check
that a partition is in the open transaction). Partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION and the rest of that transaction OPERATION_NOT_ATTEMPTED, as
Kafka answers."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.wiring import coordinator_of, for_version
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 5)

_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult
_Result = AddPartitionsToTxnResponse.AddPartitionsToTxnResult


async def _one(
    ctx: HandlerContext, version: int, tid: str, pid: int, epoch: int, topics: Any,
    verify_only: bool,
) -> list[Any]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    unknown = set()
    for name, p in wanted:
        info = ctx.topics.get(name)
        if info is None or not 0 <= p < info.partitions:
            unknown.add((name, p))
    coord = coordinator_of(ctx)
    errors: dict[tuple[str, int], int]
    if unknown:
        errors = {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    elif verify_only:
        errors = coord.verify_partitions(tid, pid, epoch, wanted)
    else:
        try:
            # v4+ without verify_only is a leader's add for Produce v12 (version 2).
            error = await coord.add_partitions(tid, pid, epoch, wanted, tv2=version >= 4)
        except Exception:  # the coordinator's table cannot be written: the client retries
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        errors = dict.fromkeys(wanted, for_version(error, version, 2))
    by_topic: dict[str, list[Any]] = {}
    for name, p in wanted:
        by_topic.setdefault(name, []).append(
            _PartitionResult(partition_index=p, partition_error_code=errors[(name, p)])
        )
    return [_TopicResult(name=n, results_by_partition=ps) for n, ps in by_topic.items()]


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    if v <= 3:
        results = await _one(
            ctx, v, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, request.v3_and_below_topics, False,
        )
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=results)
    out = []
    for txn in request.transactions:
        results = await _one(
            ctx, v, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
            txn.verify_only,
        )
        out.append(_Result(transactional_id=txn.transactional_id, topic_results=results))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=out)
