"""Fetch (key 1), v4-17: long-poll on the tail, byte limits, at least one whole batch
(``gateway.fetch.reading``), incremental fetch sessions (KIP-227,
``gateway.fetch.sessions``), topics named by id from v13 (KIP-516: an unknown id is
UNKNOWN_TOPIC_ID), and each partition's leader epoch checked against the client's
(``gateway.log.leader_epochs``). NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH name the
current leader and epoch (v12+) and, from v16, its address (KIP-951)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from tidegate.gateway.fetch import reading
from tidegate.gateway.fetch.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchPart,
    FetchSession,
    PartKey,
    next_epoch,
)
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.log.leader_epochs import epoch_error
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(FetchRequest, FetchResponse, 4, 17)

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Aborted = _Partition.AbortedTransaction
_LeaderAndEpoch = _Partition.LeaderIdAndEpoch
_NO_ID = uuid.UUID(int=0)
#: Fetch v16+ answers carry the address of each leader its errors name (KIP-951).
NODE_ENDPOINTS_VERSION = 16
#: Fetch v13+ names topics by id.
TOPIC_ID_VERSION = 13


def _asked(ctx: HandlerContext, request: Any, ids: bool) -> list[tuple[PartKey, FetchPart]]:
    out = []
    for t in request.topics:
        name = ctx.topics.name_of(t.topic_id) if ids else t.topic
        key_topic = t.topic_id if ids else t.topic
        for p in t.partitions:
            epoch = p.current_leader_epoch
            part = FetchPart(name, t.topic_id if ids else None, p.partition, p.fetch_offset,
                             max(p.partition_max_bytes, 0), -1 if epoch is None else epoch)
            out.append(((key_topic, p.partition), part))
    return out


def _forgotten(request: Any, ids: bool) -> Iterable[PartKey]:
    for t in request.forgotten_topics_data or ():
        for p in t.partitions:
            yield (t.topic_id if ids else t.topic, p)


async def _resolve(ctx: HandlerContext, req: RequestContext, parts: list[FetchPart],
                   ids: bool) -> None:
    """Each partition's log for this fetch, or its error. READ is checked on every fetch,
    a session's cached partitions too (Kafka's rule: a removed ACL stops the consumer)."""
    cluster = ctx.cluster
    epochs = ctx.leader_epochs
    authorizing = ctx.security is not None and ctx.security.authorizer is not None
    refused: dict[str, bool] = {}
    for part in parts:
        part.plog, part.error, part.leader_hint, part.hint_epoch = None, ErrorCode.NONE, -1, -1
        if authorizing and part.topic is not None:
            if part.topic not in refused:  # once per topic and fetch
                refused[part.topic] = refusal(
                    ctx.security, req.session, Operation.READ, ResourceType.TOPIC, part.topic
                ) is not None
            if refused[part.topic]:
                part.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
        info = ctx.topics.get(part.topic) if part.topic is not None else None
        if info is None or (ids and info.topic_id != part.topic_id):
            part.error = ErrorCode.UNKNOWN_TOPIC_ID if ids else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if not 0 <= part.partition < info.partitions:
            part.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if cluster is not None:
            part.error = await cluster.partition_error(info.name, part.partition)
            if part.error != ErrorCode.NONE:
                if part.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    leader, epoch = await cluster.leader_and_epoch(info.name, part.partition)
                    if leader is not None:
                        part.leader_hint, part.hint_epoch = leader, epoch
                continue
        if part.leader_epoch >= 0 and epochs is not None:
            # Read after the leadership check: the epoch of the map that made this node leader.
            current = epochs.current(info.name, part.partition)
            if part.leader_epoch != current:
                part.error = epoch_error(part.leader_epoch, current)
                if part.error == ErrorCode.FENCED_LEADER_EPOCH:
                    part.leader_hint, part.hint_epoch = ctx.config.node_id, current
                continue
        # Opened after the leadership check: a log opened before may predate a takeover.
        part.plog = ctx.logs.get(info.name, part.partition)


def _endpoints(ctx: HandlerContext, req: RequestContext, nodes: set[int]) -> list[Any]:
    out = []
    for node in sorted(nodes):
        if ctx.cluster is not None:
            address = ctx.cluster.kafka_address(
                node, req.session.listener.name if req.session else None)
        else:
            address = ctx.config.advertised_address if node == ctx.config.node_id else None
        if address is not None:
            out.append(FetchResponse.NodeEndpoint(node_id=node, host=address[0],
                                                  port=address[1], rack=None))
    return out


def _error(code: ErrorCode) -> Any:
    return FetchResponse(throttle_time_ms=0, error_code=code, session_id=0, responses=[])


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    req.release()  # fetches only read: later requests need not wait for the long poll
    version = req.api_version
    ids = version >= TOPIC_ID_VERSION
    cache = ctx.fetch_sessions
    session: FetchSession | None = None
    asked: list[tuple[PartKey, FetchPart]] = []
    create = False
    if request.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if request.session_id != 0 and cache is not None:
            cache.remove(request.session_id)  # a full fetch closes the session it names
        asked = _asked(ctx, request, ids)
        parts = [p for _, p in asked]
        create = request.session_epoch == INITIAL_EPOCH and cache is not None
        if cache is not None:
            if create:
                cache.counts.full += 1
            else:
                cache.counts.sessionless += 1
    else:
        if cache is None:
            return _error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        session, code = cache.incremental(request.session_id, request.session_epoch, ids)
        if session is None:
            cache.counts.errors += 1
            return _error(code)
        cache.counts.incremental += 1
        session.update(_asked(ctx, request, ids), _forgotten(request, ids))
        if cache.too_large(session):
            cache.remove(session.id)
            return _error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if not session.parts:  # everything forgotten: Kafka drops the session
            cache.remove(session.id)
            session = None
            parts = []
        else:
            cache.touch(session, ctx.clock_ms())
            session.epoch = next_epoch(session.epoch)
            parts = list(session.parts.values())
    await _resolve(ctx, req, parts, ids)
    await _poll(ctx, request, parts)
    answered, body, spliced, tokens = _answer(ctx, request, parts, session, create)
    session_id = 0
    if session is not None:
        session_id = session.id
        session.rotate(answered)
    elif create and cache is not None:
        session_id = cache.maybe_create(False, dict(asked), ids)
    body.session_id = session_id
    if version >= NODE_ENDPOINTS_VERSION:
        body.node_endpoints = _endpoints(ctx, req, {p.leader_hint for p in answered if p.leader_hint >= 0})
    encoded = reading.splice(body, version, spliced, tokens)
    if session is not None or session_id:
        for part in parts:  # a cached session must not hold the answer's buffers or logs
            part.chunks, part.plog = [], None
    return encoded


async def _poll(ctx: HandlerContext, request: Any, parts: list[FetchPart]) -> None:
    """Read until ``min_bytes`` are there, an error shows, or the wait ends."""
    response_max_bytes = min(max(request.max_bytes, 0), ctx.config.fetch_max_bytes)
    max_wait_s = min(max(request.max_wait_ms, 0), ctx.config.fetch_max_wait_ms_max) / 1000
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    min_bytes = max(request.min_bytes, 0)
    txns = ctx.partition_txns
    read_committed = request.isolation_level == 1
    while True:
        total = 0
        reading.set_ends(parts, txns, read_committed)
        reading.check_ranges(parts)
        if any(reading.available(p) for p in parts):
            total = await reading.read(ctx, parts, response_max_bytes)
        else:
            for p in parts:
                p.chunks, p.size = [], 0
        remaining = deadline - loop.time()
        if total >= min_bytes or remaining <= 0 or any(p.error for p in parts):
            return
        if ctx.stopping.is_set():
            return
        await reading.wait_for_growth(ctx, parts, remaining)


def _answer(ctx: HandlerContext, request: Any, parts: list[FetchPart],
            session: FetchSession | None, remember: bool
            ) -> tuple[list[FetchPart], Any, list[FetchPart], list[bytes]]:
    """The answer's partitions grouped by topic (an incremental fetch: only those
    Kafka's rule says must be sent), the response around them with a placeholder for
    the records of each one that has some (``reading.splice``; the others are encoded
    empty, as the splice would), those partitions and their placeholders. ``remember``:
    a full fetch that may open a session notes what it answered."""
    txns = ctx.partition_txns
    read_committed = request.isolation_level == 1
    grouped: dict[Any, list[FetchPart]] = {}
    for part in parts:
        key = part.topic_id if part.topic_id is not None else part.topic
        group = grouped.get(key)
        if group is None:
            grouped[key] = [part]
        else:
            group.append(part)
    ordered: list[FetchPart] = []
    spliced: list[FetchPart] = []
    tokens: list[bytes] = []
    topics = []
    for group in grouped.values():
        answers = []
        for part in group:
            plog = part.plog
            hw = plog.high_watermark if plog is not None else -1
            start = plog.log_start_offset if plog is not None else -1
            lso = hw
            if plog is not None and txns is not None:
                lso = txns.last_stable_offset(plog.topic, part.partition, hw)
            if session is not None:
                if not part.must_answer(hw, lso, start):
                    continue
            elif remember:
                part.sent_hw, part.sent_lso, part.sent_start = hw, lso, start
            aborted: list[Any] | None = None
            if read_committed:
                aborted = []
                if txns is not None and part.size and plog is not None:
                    aborted = [
                        _Aborted(producer_id=t.producer_id, first_offset=t.first_offset)
                        for t in txns.aborted(plog.topic, part.partition, part.offset, part.end)
                    ]
            ordered.append(part)
            records = b""
            if part.size:
                records = reading.token(len(tokens))
                tokens.append(records)
                spliced.append(part)
            answer = _Partition(
                partition_index=part.partition, error_code=part.error, high_watermark=hw,
                last_stable_offset=lso, log_start_offset=start, aborted_transactions=aborted,
                preferred_read_replica=-1, records=records,
            )
            if part.leader_hint >= 0 and part.hint_epoch >= 0:
                answer.current_leader = _LeaderAndEpoch(leader_id=part.leader_hint,
                                                        leader_epoch=part.hint_epoch)
            answers.append(answer)
        if answers:
            first = group[0]
            topics.append(_Topic(topic=first.topic or "", topic_id=first.topic_id or _NO_ID,
                                 partitions=answers))
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
    return ordered, response, spliced, tokens
