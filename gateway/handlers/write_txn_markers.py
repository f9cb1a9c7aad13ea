"""WriteTxnMarkers (key 27), v1-2: what Kafka's coordinators send partition leaders,
and what the Admin's ``abortTransaction`` (``kafka-transactions.sh abort``, KIP-664)
sends to close a hanging transaction in a partition. Only abort markers are accepted
(commit: INVALID_REQUEST): here the coordinator writes its own markers, and an
outside commit could only split a transaction's fate. A partition that the
coordinator's open transaction of that producer holds answers INVALID_TXN_STATE: that
transaction ends through its coordinator (EndTxn, a new incarnation, its timeout).
In cluster mode, the coordinator node sends a partition's leader its markers, commits
included (``gateway/cluster/txn_markers.py``); partitions led elsewhere answer
NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.markers import COORDINATOR_CLIENT_ID
from tidegate.gateway.txn.wiring import coordinator_of
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 2)

_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_Topic = _Result.WritableTxnMarkerTopicResult
_Partition = _Topic.WritableTxnMarkerPartitionResult


async def _one(ctx: HandlerContext, marker: Any, from_coordinator: bool) -> Any:
    coord = coordinator_of(ctx)
    errors: dict[tuple[str, int], int] = {}
    writable: list[tuple[str, int]] = []
    for t in marker.topics:
        info = ctx.topics.get(t.name)
        for p in t.partition_indexes:
            tp = (t.name, p)
            if info is None or not 0 <= p < info.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif ctx.cluster is not None and (
                lead_error := await ctx.cluster.partition_error(t.name, p)
            ) != ErrorCode.NONE:
                errors[tp] = lead_error
            elif from_coordinator:
                writable.append(tp)
            elif marker.transaction_result:
                errors[tp] = ErrorCode.INVALID_REQUEST
            elif coord.holds(marker.producer_id, tp):
                errors[tp] = ErrorCode.INVALID_TXN_STATE
            else:
                writable.append(tp)
    if writable:
        try:
            assert ctx.txn_markers is not None  # wired with the coordinator (gateway/app.py)
            await ctx.txn_markers.write_markers(
                writable, marker.producer_id, marker.producer_epoch,
                bool(marker.transaction_result) and from_coordinator,
            )
            errors.update(dict.fromkeys(writable, ErrorCode.NONE))
        except Exception:  # the store refused the append: the admin retries
            errors.update(dict.fromkeys(writable, ErrorCode.KAFKA_STORAGE_ERROR))
    topics: dict[str, list[Any]] = {}
    for (name, p), error in errors.items():
        topics.setdefault(name, []).append(_Partition(partition_index=p, error_code=error))
    return _Result(
        producer_id=marker.producer_id,
        topics=[_Topic(name=n, partitions=ps) for n, ps in topics.items()],
    )


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    # Cluster mode: the transaction coordinator on another node writes its markers here.
    from_coordinator = ctx.cluster is not None and req.client_id == COORDINATOR_CLIENT_ID
    return WriteTxnMarkersResponse(
        markers=[await _one(ctx, m, from_coordinator) for m in request.markers]
    )
