"""Incremental fetch sessions (KIP-227) on the wire, and the session cache's eviction
rules (Kafka's FetchSessionCache)."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from tidegate.gateway.fetch.sessions import FetchPart, FetchSessionCache
from tidegate.protocol.errors import ErrorCode as E

from tests.clients.requests import record_batch
from tests.gateway.conftest import Node, RawClient

_FT = FetchRequest.FetchTopic
_FP = _FT.FetchPartition


async def _topic(c: RawClient, name: str, partitions: int) -> uuid.UUID:
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[],
    )], timeout_ms=5000, validate_only=False)
    resp = await c.call(req, 5, CreateTopicsResponse)
    assert resp.topics[0].error_code == 0
    md = await c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                      allow_auto_topic_creation=False), 12, MetadataResponse)
    return md.topics[0].topic_id


async def _produce(c: RawClient, topic: str, partition: int, n: int) -> None:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=partition, records=record_batch([b"v%d" % i for i in range(n)]))
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000,
                         topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[part])])
    resp = await c.call(req, 9, ProduceResponse)
    assert resp.responses[0].partition_responses[0].error_code == 0


def _fetch(session_id: int, epoch: int, topics: list[Any], forgotten: list[Any] | None = None,
           max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch, topics=topics,
        forgotten_topics_data=forgotten or [], rack_id="",
    )


def _parts(topic: str, offsets: dict[int, int], topic_id: uuid.UUID | None = None) -> Any:
    return _FT(topic=topic, topic_id=topic_id or uuid.UUID(int=0), partitions=[
        _FP(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20)
        for p, o in offsets.items()
    ])


def _answered(resp: Any) -> dict[int, tuple[int, int, int]]:
    """partition -> (error, high watermark, records bytes)."""
    return {p.partition_index: (p.error_code, p.high_watermark, len(p.records or b""))
            for t in resp.responses for p in t.partitions}


async def test_incremental_session_sends_only_what_changed(node: Node) -> None:
    c = await node.client()
    await _topic(c, "s", 4)
    await _produce(c, "s", 1, 3)
    full = await c.call(_fetch(0, 0, [_parts("s", {0: 0, 1: 0, 2: 0, 3: 0})]), 12, FetchResponse)
    assert full.error_code == 0 and full.session_id != 0
    got = _answered(full)
    assert set(got) == {0, 1, 2, 3} and got[1][1] == 3 and got[1][2] > 0
    sid = full.session_id
    # Nothing changed and the client moved partition 1 on: an empty answer.
    inc = await c.call(_fetch(sid, 1, [_parts("s", {1: 3})]), 12, FetchResponse)
    assert inc.error_code == 0 and inc.session_id == sid and _answered(inc) == {}
    # New records on partition 2 only: the answer holds partition 2 alone.
    await _produce(c, "s", 2, 2)
    inc = await c.call(_fetch(sid, 2, []), 12, FetchResponse)
    got = _answered(inc)
    assert list(got) == [2] and got[2][1] == 2 and got[2][2] > 0
    # Forgetting partitions 2 and 3, then producing to them: not answered any more.
    inc = await c.call(_fetch(sid, 3, [_parts("s", {2: 2})],
                              [FetchRequest.ForgottenTopic(topic="s", partitions=[2, 3])]),
                       12, FetchResponse)
    assert inc.error_code == 0
    await _produce(c, "s", 3, 1)
    await _produce(c, "s", 0, 1)
    inc = await c.call(_fetch(sid, 4, []), 12, FetchResponse)
    assert list(_answered(inc)) == [0]
    # A wrong epoch, an unknown session, a session of names asked by id.
    bad = await c.call(_fetch(sid, 9, []), 12, FetchResponse)
    assert bad.error_code == E.INVALID_FETCH_SESSION_EPOCH and bad.session_id == 0
    bad = await c.call(_fetch(sid + 1, 1, []), 12, FetchResponse)
    assert bad.error_code == E.FETCH_SESSION_ID_NOT_FOUND
    bad = await c.call(_fetch(sid, 5, []), 13, FetchResponse)
    assert bad.error_code == E.FETCH_SESSION_TOPIC_ID_ERROR
    # The session still works at its epoch; a full fetch naming it closes it.
    ok = await c.call(_fetch(sid, 5, []), 12, FetchResponse)
    assert ok.error_code == 0
    full = await c.call(_fetch(sid, -1, [_parts("s", {0: 0})]), 12, FetchResponse)
    assert full.session_id == 0 and list(_answered(full)) == [0]
    gone = await c.call(_fetch(sid, 6, []), 12, FetchResponse)
    assert gone.error_code == E.FETCH_SESSION_ID_NOT_FOUND
    await c.close()


async def test_sessions_by_topic_id(node: Node) -> None:
    c = await node.client()
    tid = await _topic(c, "ids", 2)
    await _produce(c, "ids", 0, 2)
    unknown = uuid.uuid4()
    full = await c.call(_fetch(0, 0, [_parts("", {0: 0, 1: 0}, tid), _parts("", {0: 0}, unknown)]),
                        13, FetchResponse)
    assert full.session_id != 0
    by_id = {t.topic_id: {p.partition_index: p.error_code for p in t.partitions}
             for t in full.responses}
    assert by_id == {tid: {0: 0, 1: 0}, unknown: {0: E.UNKNOWN_TOPIC_ID}}
    # The unknown topic's partition keeps answering its error; the others are quiet.
    inc = await c.call(_fetch(full.session_id, 1, [_parts("", {0: 2}, tid)]), 13, FetchResponse)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in inc.responses] == [
        (unknown, [0])]
    inc = await c.call(_fetch(full.session_id, 2, [], [
        FetchRequest.ForgottenTopic(topic_id=unknown, partitions=[0])]), 13, FetchResponse)
    assert inc.responses == []
    await c.close()


async def test_sessionless_fetches_open_no_session(node: Node) -> None:
    c = await node.client()
    await _topic(c, "nl", 1)
    for _ in range(3):
        resp = await c.call(_fetch(0, -1, [_parts("nl", {0: 0})]), 12, FetchResponse)
        assert resp.session_id == 0 and list(_answered(resp)) == [0]
    assert node.gateway is not None and node.gateway.ctx is not None
    cache = node.gateway.ctx.fetch_sessions
    assert cache is not None and not cache.sessions and cache.counts.sessionless == 3
    await c.close()


def _session_parts(n: int) -> dict[Any, FetchPart]:
    return {("t", p): FetchPart("t", None, p, 0, 1, -1) for p in range(n)}


def test_cache_full_evicts_stale_then_smaller_older_sessions() -> None:
    now = [0]
    cache = FetchSessionCache(slots=2, clock_ms=lambda: now[0], eviction_ms=1000)
    a = cache.maybe_create(False, _session_parts(5), False)
    b = cache.maybe_create(False, _session_parts(2), False)
    assert a and b and cache.partitions == 7
    # Full, and no session is stale or old enough: no room.
    assert cache.maybe_create(False, _session_parts(9), False) == 0
    # Past the eviction time since b's creation: b is the least recently used and stale.
    now[0] = 500
    session_a = cache.get(a)
    assert session_a is not None
    cache.touch(session_a, 500)
    now[0] = 1200
    c = cache.maybe_create(False, _session_parts(3), False)
    assert c and cache.get(b) is None and cache.counts.evictions == 1
    # Neither stale (a used at 1300 after its creation long ago; c new): a is evictable by
    # age (touched when older than eviction_ms) only by a larger session.
    now[0] = 1300
    cache.touch(session_a, 1300)
    assert cache.maybe_create(False, _session_parts(5), False) == 0  # not larger than a
    d = cache.maybe_create(False, _session_parts(6), False)
    assert d and cache.get(a) is None and cache.get(c) is not None
    # A privileged session may evict a young non-privileged one.
    e = cache.maybe_create(True, _session_parts(1), False)
    assert e and len(cache.sessions) == 2 and cache.counts.evictions == 3


async def test_sessions_are_bounded_in_partitions(node: Node) -> None:
    assert node.gateway is not None and node.gateway.ctx is not None
    cache = node.gateway.ctx.fetch_sessions
    assert cache is not None
    cache.partitions_max = 3
    c = await node.client()
    await _topic(c, "b", 4)
    big = await c.call(_fetch(0, 0, [_parts("b", {0: 0, 1: 0, 2: 0, 3: 0})]), 12, FetchResponse)
    assert big.error_code == 0 and big.session_id == 0  # answered, no session
    small = await c.call(_fetch(0, 0, [_parts("b", {0: 0, 1: 0})]), 12, FetchResponse)
    assert small.session_id != 0
    grown = await c.call(_fetch(small.session_id, 1, [_parts("b", {2: 0, 3: 0})]), 12, FetchResponse)
    assert grown.error_code == E.FETCH_SESSION_ID_NOT_FOUND and not cache.sessions
    assert cache.partitions == 0
    await c.close()
