"""ShareFetch (key 78), v1-2: a share group member's fetch (KIP-932). In one request:
the share session (epoch 0 opens it, -1 closes it and releases what the member holds,
otherwise it must be the session's next epoch), acknowledgements of records fetched
before (applied and stored before the answer), and records acquired for this member
with a lock, waiting up to ``max_wait_ms`` for some (``gateway/share/``).

The records answered are whole stored batches; ``AcquiredRecords`` says which offsets in
them this member holds (the client hands out only those, as with Kafka)."""

from __future__ import annotations

import asyncio
from typing import Any

from tidegate.gateway.fetch.reading import wait_on_logs
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.share_group_heartbeat import member_refusal, member_share
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.gateway.share import reading
from tidegate.gateway.share.coordinator import ShareCoordinator, ShareSession
from tidegate.gateway.share.reading import SharePart
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.share_group import ShareFetchRequest, ShareFetchResponse

SPEC = ApiSpec(ShareFetchRequest, ShareFetchResponse, 1, 2)

_Topic = ShareFetchResponse.ShareFetchableTopicResponse
_Partition = _Topic.PartitionData
_Leader = _Partition.LeaderIdAndEpoch
_Acquired = _Partition.AcquiredRecords
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
_EPOCH_MAX = 2**31 - 1


def _error(code: ErrorCode, message: str | None) -> Any:
    return ShareFetchResponse(throttle_time_ms=0, error_code=code, error_message=message,
                              acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])


def session_for(share: ShareCoordinator, group_id: str, member_id: str, epoch: int,
                may_open: bool) -> tuple[ShareSession | None, ErrorCode, str | None]:
    """The request's share session after its epoch is checked and moved on."""
    if epoch == INITIAL_EPOCH:
        if not may_open:
            return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH, "epoch 0 cannot acknowledge"
        session = share.open_session(group_id, member_id)
        if session is None:
            return None, ErrorCode.SHARE_SESSION_LIMIT_REACHED, "too many share sessions"
        return session, ErrorCode.NONE, None
    session = share.sessions.get((group_id, member_id))
    if session is None:
        return None, ErrorCode.SHARE_SESSION_NOT_FOUND, "no share session for this member"
    if epoch == FINAL_EPOCH:
        return session, ErrorCode.NONE, None
    if epoch != session.epoch:
        return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH, (
            f"share session epoch {epoch}, expected {session.epoch}")
    session.epoch = session.epoch + 1 if session.epoch < _EPOCH_MAX else 1
    return session, ErrorCode.NONE, None


def close_session(share: ShareCoordinator, session: ShareSession) -> None:
    share.sessions.pop((session.group_id, session.member_id), None)
    share.release_session(session)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    req.release()  # share fetches long-poll: later requests need not wait
    group_id, member_id = request.group_id or "", request.member_id or ""
    failed = member_refusal(ctx, req, group_id, member_id)
    if failed is not None:
        return _error(*failed)
    share = member_share(ctx)
    assert share is not None
    epoch = request.share_session_epoch
    acking = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    if epoch == INITIAL_EPOCH and acking:
        return _error(ErrorCode.INVALID_REQUEST, "Acknowledge data present on initial epoch")
    session, code, message = session_for(share, group_id, member_id, epoch, True)
    if session is None:
        return _error(code, message)
    parts: dict[tuple[Any, int], SharePart] = {}
    logs: dict[tuple[Any, int], PartitionLog] = {}
    changed: dict[tuple[str, int], SharePart] = {}
    for t in request.topics:
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            part = parts[key] = SharePart(t.topic_id, p.partition_index)
            plog = None
            resolved = reading.resolve(ctx, req, part)
            if resolved:
                plog = await reading.lead(ctx, share, group_id, part, epoch == INITIAL_EPOCH)
            if plog is not None:
                logs[key] = plog
            if resolved and epoch != FINAL_EPOCH and part.topic is not None:
                # Kept while led elsewhere, as Kafka does: every fetch answers its error
                # until the client forgets it (an answer lost must not silence it).
                session.partitions.add((part.topic, part.partition))
            if p.acknowledgement_batches and reading.acknowledge(
                share, group_id, member_id, part, plog, p.acknowledgement_batches
            ) and plog is not None:
                changed[(plog.topic, plog.partition)] = part
    for t in request.forgotten_topics_data or ():
        name = ctx.topics.name_of(t.topic_id)
        for p in t.partitions:
            if name is not None:
                session.partitions.discard((name, p))
    if changed:
        for tp in await share.persist(group_id, changed):
            changed[tp].ack_error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            changed[tp].ack_message = "the share-partition moved; its records come again"
    if epoch == FINAL_EPOCH:
        close_session(share, session)
    else:
        for topic, partition in sorted(session.partitions):
            info = ctx.topics.get(topic)
            if info is None or partition >= info.partitions:
                session.partitions.discard((topic, partition))
                continue
            key = (info.topic_id, partition)
            if key in parts:
                continue
            part = parts[key] = SharePart(info.topic_id, partition, topic)
            plog = await reading.lead(ctx, share, group_id, part)
            if plog is not None:  # else led elsewhere now: the client is told where
                logs[key] = plog
        await _poll(ctx, share, request, group_id, member_id, parts, logs)
    return _answer(ctx, req, share, group_id, parts)


async def _poll(ctx: HandlerContext, share: ShareCoordinator, request: Any, group_id: str,
                member_id: str, parts: dict[tuple[Any, int], SharePart],
                logs: dict[tuple[Any, int], PartitionLog]) -> None:
    """Acquire records until some are, a partition fails, or the wait ends (woken by
    appends, releases and lock expiries)."""
    loop = asyncio.get_running_loop()
    wait_ms = min(max(request.max_wait_ms, 0), share.config.fetch_wait_ms_max)
    deadline = loop.time() + wait_ms / 1000
    max_bytes = min(max(request.max_bytes, 0), ctx.config.fetch_max_bytes)
    max_records = request.max_records if request.max_records > 0 else 500
    while True:
        got = total_bytes = 0
        for key, plog in logs.items():
            part = parts[key]
            if part.error != ErrorCode.NONE:
                continue
            n = await reading.acquire(ctx, share, group_id, member_id, part, plog,
                                      max_bytes - total_bytes, max_records - got, total_bytes == 0)
            got += n
            total_bytes += len(part.records)
            if got >= max_records or total_bytes >= max_bytes:
                break
        remaining = deadline - loop.time()
        failed = any(part.error != ErrorCode.NONE for part in parts.values())
        if got or failed or remaining <= 0 or ctx.stopping.is_set():
            return
        await _wait(ctx, share, group_id, list(logs.values()), remaining)


async def _wait(ctx: HandlerContext, share: ShareCoordinator, group_id: str,
                plogs: list[PartitionLog], timeout_s: float) -> None:
    """Until a partition grows, records are released, a lock expires, or ``timeout_s``."""
    group = share.describe(group_id)
    if group is not None:
        deadlines = [d for sp in group.partitions.values()
                     if (d := sp.next_deadline_ms()) is not None]
        if deadlines:
            timeout_s = min(timeout_s, max(min(deadlines) - ctx.clock_ms(), 0) / 1000 + 0.001)
    waiter = share.waiter()
    try:
        await wait_on_logs(ctx, plogs, timeout_s, waiter)
    finally:
        share.forget_waiter(waiter)


def _answer(ctx: HandlerContext, req: RequestContext, share: ShareCoordinator, group_id: str,
            parts: dict[tuple[Any, int], SharePart]) -> Any:
    by_topic: dict[Any, list[Any]] = {}
    for (topic_id, partition), part in parts.items():
        if part.error == ErrorCode.NONE and part.ack_error is None and not part.acquired:
            continue  # nothing to say about it
        by_topic.setdefault(topic_id, []).append(_Partition(
            partition_index=partition, error_code=part.error, error_message=part.message,
            acknowledge_error_code=part.ack_error or ErrorCode.NONE,
            acknowledge_error_message=part.ack_message,
            current_leader=_Leader(leader_id=part.leader_id, leader_epoch=part.leader_epoch),
            # Never null: kafka-clients 4.3 fails to parse the whole response otherwise.
            records=part.records if part.acquired else b"",
            acquired_records=[_Acquired(first_offset=a.first_offset, last_offset=a.last_offset,
                                        delivery_count=a.delivery_count) for a in part.acquired],
        ))
    return ShareFetchResponse(
        throttle_time_ms=0, error_code=0, error_message=None,
        acquisition_lock_timeout_ms=share.lock_duration_ms(group_id),
        responses=[_Topic(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
        node_endpoints=reading.endpoints(ctx, req, parts.values(), ShareFetchResponse.NodeEndpoint),
    )
