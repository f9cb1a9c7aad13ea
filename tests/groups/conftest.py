"""A coordinator over the in-memory segment store with a clock the test moves; an
in-process gateway (``node``) and a raw connection to it (``client``) for the handler tests."""

from __future__ import annotations

import asyncio
import random
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# kafka-python 3.0.12 loads its JSON schemas with importlib.resources.read_text, which
# Python 3.11 deprecates; with warnings as errors the first import must be shielded.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401
    import kafka.protocol.consumer.metadata  # noqa: F401

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.groups import GroupConfig, GroupCoordinator, JoinRequest, JoinResult

from tests.gateway.conftest import Node, RawClient


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store() -> InMemorySegmentStore:
    return InMemorySegmentStore()


def make_coordinator(
    store: InMemorySegmentStore, clock: FakeClock, **config: int
) -> GroupCoordinator:
    config.setdefault("initial_rebalance_delay_ms", 0)
    return GroupCoordinator(
        store, GroupConfig(**config), clock_ms=clock, wall_clock_ms=clock, rng=random.Random(7)
    )


@pytest.fixture
async def coord(store: InMemorySegmentStore, clock: FakeClock) -> AsyncIterator[GroupCoordinator]:
    c = make_coordinator(store, clock)
    await c.start(ticker=False)
    yield c
    await c.close()


def join_req(
    group: str = "g",
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    session_ms: int = 10_000,
    rebalance_ms: int = 30_000,
    client_id: str = "client",
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=protocols if protocols is not None else [("range", b"meta-" + client_id.encode())],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        client_id=client_id,
        client_host="/127.0.0.1",
    )


async def join_fully(coord: GroupCoordinator, req: JoinRequest) -> asyncio.Task[JoinResult]:
    """Do the MEMBER_ID_REQUIRED round trip, then start the real join as a task (it
    may wait for the rest of the group)."""
    first = await coord.join_group(req)
    assert first.error == 79, first  # MEMBER_ID_REQUIRED
    second = JoinRequest(**{**_fields(req), "member_id": first.member_id})
    task = asyncio.create_task(coord.join_group(second))
    await asyncio.sleep(0)
    return task


def _fields(req: JoinRequest) -> dict[str, object]:
    return {f: getattr(req, f) for f in req.__dataclass_fields__}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def join_all(coord: GroupCoordinator, reqs: list[JoinRequest]) -> list[JoinResult]:
    """Several new members join one generation: ids first (pending ids keep the join
    phase open), then all joins at once."""
    firsts = [await coord.join_group(r) for r in reqs]
    return list(
        await asyncio.gather(
            *(
                coord.join_group(JoinRequest(**{**_fields(r), "member_id": f.member_id}))
                for r, f in zip(reqs, firsts, strict=True)
            )
        )
    )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    """An in-process gateway whose groups rebalance at once."""
    n = Node(tmp_path / "data", groups={"initial_rebalance_delay_ms": 0})
    await n.start()
    try:
        yield n
    finally:
        await n.close()


@pytest.fixture
async def client(node: Node) -> AsyncIterator[RawClient]:
    """A raw Kafka connection to ``node``, with topic ``t`` of two partitions."""
    c = await node.client()
    topic = CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=2, replication_factor=1, assignments=[], configs=[]
    )
    res = await c.call(
        CreateTopicsRequest(topics=[topic], timeout_ms=5000, validate_only=False), 5, CreateTopicsResponse
    )
    assert res.topics[0].error_code == 0
    try:
        yield c
    finally:
        await c.close()
