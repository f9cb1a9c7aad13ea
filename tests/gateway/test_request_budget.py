"""``gateway.net.request_budget.RequestBudget`` (``queued.max.request.bytes``) on its own,
and in the server: with a budget of one byte the node serves one request at a time,
whatever the connections pipeline, and answers all of them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.protocol.producer import ProduceRequest, ProduceResponse
from tidegate.gateway.net.request_budget import RequestBudget

from tests.clients.requests import record_batch
from tests.gateway.conftest import Node
from tests.gateway.test_produce_fetch import create

P = ProduceRequest.TopicProduceData


async def test_waiters_are_served_in_order_and_a_large_one_alone() -> None:
    budget = RequestBudget(100)
    await budget.acquire(60)
    order: list[str] = []

    async def take(name: str, size: int) -> None:
        await budget.acquire(size)
        order.append(name)

    big = asyncio.ensure_future(take("big", 500))  # larger than the whole budget
    small = asyncio.ensure_future(take("small", 10))  # fits, but waits behind "big"
    await asyncio.sleep(0)
    assert order == []
    budget.release(60)  # "big" goes in alone; "small" still waits
    await asyncio.sleep(0)
    assert order == ["big"] and budget.used == 500
    budget.release(500)
    await asyncio.gather(big, small)
    assert order == ["big", "small"] and budget.used == 10 and budget.peak == 500


async def test_a_cancelled_waiter_holds_nothing_and_lets_the_next_in() -> None:
    budget = RequestBudget(100)
    await budget.acquire(90)
    first = asyncio.ensure_future(budget.acquire(50))
    second = asyncio.ensure_future(budget.acquire(5))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.wait_for(second, 1)
    assert first.cancelled() and budget.used == 95
    budget.release(95)
    assert budget.used == 0


async def test_no_bound_when_the_limit_is_zero() -> None:
    budget = RequestBudget(0)
    for _ in range(10):
        await budget.acquire(1 << 30)
    assert budget.used == 10 << 30


async def test_one_request_at_a_time_when_the_budget_is_one_byte(tmp_path: Path) -> None:
    node = Node(tmp_path / "data", queued_max_request_bytes=1)
    await node.start()
    try:
        clients = [await node.client() for _ in range(3)]
        await create(clients[0], "t", 1)
        ids: list[list[int]] = [[] for _ in clients]
        sizes: list[int] = []
        for i in range(10):
            for c, sent in zip(clients, ids, strict=True):
                req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
                    P(name="t", partition_data=[
                        P.PartitionProduceData(index=0, records=record_batch([b"%d" % i]))])])  # fmt: skip
                sent.append(await c.send(req, 9))
                sizes.append(len(req.encode(version=9, header=True, framed=True)) - 4)
        offsets = []
        for c, sent in zip(clients, ids, strict=True):
            for cid in sent:
                resp = await c.recv(ProduceResponse, 9)
                assert resp.header.correlation_id == cid
                part = resp.responses[0].partition_responses[0]
                assert part.error_code == 0
                offsets.append(part.base_offset)
        assert sorted(offsets) == list(range(30))
        assert node.gateway is not None and node.gateway.server is not None
        budget = node.gateway.server.request_bytes
        assert budget.used == 0
        assert max(sizes) < 2 * min(sizes)
        assert budget.peak <= max(sizes)  # never two frames at once
        for c in clients:
            await c.close()
    finally:
        await node.close()
