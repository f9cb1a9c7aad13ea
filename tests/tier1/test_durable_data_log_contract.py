"""The Tier-1 ``DurableDataLog`` contract, run against every implementation.

Each implementation is described by a ``LogMaker``: ``make()`` returns a new log object
over the same durable state (a directory, a shared backing), as a restarted process or
a competing owner would see it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from tidegate.core.segmentstore.tier1.api import (
    DataLogClosedError,
    DataLogError,
    DataLogFencedError,
    DurableDataLog,
    LogAddress,
)
from tidegate.core.segmentstore.tier1.faults import FaultyDurableDataLog
from tidegate.core.segmentstore.tier1.filelog import FileDurableDataLog
from tidegate.core.segmentstore.tier1.inmemory import InMemoryDurableDataLog, InMemoryLogBacking

LogMaker = Callable[..., DurableDataLog]


def _inmemory(tmp: Path) -> LogMaker:
    backing = InMemoryLogBacking()

    def make(**kw: int) -> DurableDataLog:
        return InMemoryDurableDataLog(
            backing,
            in_flight_bytes_max=kw.get("in_flight_bytes_max", 1 << 20),
            file_entries_max=kw.get("roll", 5),
        )

    return make


def _file(tmp: Path) -> LogMaker:
    def make(**kw: int) -> DurableDataLog:
        # Tiny files so the suite crosses file boundaries.
        return FileDurableDataLog(
            tmp,
            file_bytes_max=kw.get("roll", 5) * 40,
            in_flight_bytes_max=kw.get("in_flight_bytes_max", 1 << 20),
        )

    return make


def _replicated(request: pytest.FixtureRequest, tmp: Path) -> LogMaker:
    """Three real plog servers and ZooKeeper (session-wide); a log name per test."""
    from tidegate.core.cluster.zookeeper import ZooKeeper
    from tidegate.core.segmentstore.tier1.replicated.cluster import ZooKeeperPlogCoordinator
    from tidegate.core.segmentstore.tier1.replicated.log import ReplicatedDurableDataLog

    cluster = request.getfixturevalue("plog_cluster")
    name = "contract-" + re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[-48:]
    clients: list[ZooKeeper] = []
    request.addfinalizer(lambda: [zk.stop_blocking() for zk in clients])

    def make(**kw: int) -> DurableDataLog:
        zk = ZooKeeper(cluster.zookeeper.hosts)
        clients.append(zk)
        return ReplicatedDurableDataLog(
            name,
            ZooKeeperPlogCoordinator(zk, cluster.root),
            plog_bytes_max=kw.get("roll", 5) * 100,
            in_flight_bytes_max=kw.get("in_flight_bytes_max", 1 << 20),
            # Only the failure tests fail servers: a disk slowed by other work must not.
            timeout_ms=20_000,
        )

    return make


MAKERS: dict[str, Callable[[Path], LogMaker]] = {"inmemory": _inmemory, "file": _file}


@pytest.fixture(params=[*sorted(MAKERS), "replicated"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> LogMaker:
    if request.param == "replicated":
        return _replicated(request, tmp_path)
    return MAKERS[request.param](tmp_path / "t1")


async def _read_all(
    log: DurableDataLog, start: LogAddress | None = None
) -> list[tuple[LogAddress, bytes]]:
    return [item async for item in log.read(start)]


async def test_append_read_roundtrip(make_log: LogMaker) -> None:
    log = make_log()
    await log.open()
    assert log.epoch >= 1
    entries = [bytes([i]) * (i * 7 + 1) for i in range(23)] + [b""]
    addrs = [await log.append(e) for e in entries]
    assert addrs == sorted(addrs) and len(set(addrs)) == len(addrs)
    await log.close()
    log2 = make_log()
    await log2.open()
    got = await _read_all(log2)
    assert got == list(zip(addrs, entries, strict=True))
    await log2.close()


async def test_concurrent_appends_complete_in_order(make_log: LogMaker) -> None:
    log = make_log()
    await log.open()
    completed: list[int] = []

    async def one(i: int) -> LogAddress:
        addr = await log.append(i.to_bytes(4, "big") * (i % 13 + 1))
        completed.append(i)
        return addr

    tasks = [asyncio.ensure_future(one(i)) for i in range(200)]
    addrs = await asyncio.gather(*tasks)
    assert completed == list(range(200))
    assert list(addrs) == sorted(addrs)
    await log.close()
    log2 = make_log()
    await log2.open()
    got = await _read_all(log2)
    assert [d for _, d in got] == [i.to_bytes(4, "big") * (i % 13 + 1) for i in range(200)]
    await log2.close()


async def test_in_flight_bound_keeps_order(make_log: LogMaker) -> None:
    log = make_log(in_flight_bytes_max=1000)
    await log.open()
    payloads = [bytes([i % 256]) * (300 + i) for i in range(40)] + [b"x" * 5000]
    addrs = await asyncio.gather(*(log.append(p) for p in payloads))
    assert list(addrs) == sorted(addrs)
    await log.close()
    log2 = make_log()
    await log2.open()
    assert [d for _, d in await _read_all(log2)] == payloads
    await log2.close()


async def test_read_from_address(make_log: LogMaker) -> None:
    log = make_log()
    await log.open()
    addrs = [await log.append(b"e%d" % i) for i in range(12)]
    await log.close()
    log2 = make_log()
    await log2.open()
    got = await _read_all(log2, addrs[7])
    assert got == [(a, b"e%d" % i) for i, a in enumerate(addrs) if i >= 7]
    assert await _read_all(log2, LogAddress(10**6, 0)) == []
    await log2.close()


async def test_truncate(make_log: LogMaker) -> None:
    log = make_log()
    await log.open()
    addrs = [await log.append(b"e%d" % i) for i in range(17)]
    await log.truncate(addrs[9])
    assert [d for _, d in await _read_all(log)] == [b"e%d" % i for i in range(9, 17)]
    more = await log.append(b"after")
    await log.close()
    log2 = make_log()
    await log2.open()
    got = await _read_all(log2)
    assert got == [(a, b"e%d" % i) for i, a in enumerate(addrs) if i >= 9] + [(more, b"after")]
    # Truncating at an address between entries keeps the entry at or after it.
    await log2.truncate(LogAddress(addrs[11].file_id, addrs[11].position + 1))
    assert (await _read_all(log2))[0] == (addrs[12], b"e12")
    with pytest.raises(DataLogError):
        await log2.truncate(LogAddress(10**6, 0))
    await log2.close()


async def test_open_bumps_epoch_and_fences(make_log: LogMaker) -> None:
    old = make_log()
    await old.open()
    await old.append(b"before")
    new = make_log()
    await new.open()
    assert new.epoch > old.epoch
    with pytest.raises(DataLogFencedError):
        await old.append(b"zombie")
    with pytest.raises(DataLogClosedError):
        await old.append(b"zombie-2")
    await new.append(b"after")
    await new.close()
    await old.close()
    check = make_log()
    await check.open()
    assert [d for _, d in await _read_all(check)] == [b"before", b"after"]
    await check.close()


async def test_closed_log_refuses(make_log: LogMaker) -> None:
    log = make_log()
    with pytest.raises(DataLogClosedError):
        await log.append(b"not open")
    await log.open()
    await log.append(b"x")
    await log.close()
    await log.close()
    with pytest.raises(DataLogClosedError):
        await log.append(b"closed")


async def test_failed_append_closes_log(make_log: LogMaker) -> None:
    inner = make_log()
    log = FaultyDurableDataLog(inner, fail_after_appends=5)
    await log.open()
    results = await asyncio.gather(
        *(log.append(b"f%d" % i) for i in range(9)), return_exceptions=True
    )
    assert all(isinstance(r, LogAddress) for r in results[:5])
    assert isinstance(results[5], DataLogError)
    assert all(isinstance(r, DataLogClosedError) for r in results[6:])
    with pytest.raises(DataLogClosedError):
        await log.append(b"later")
    await log.close()
    check = make_log()
    await check.open()
    assert [d for _, d in await _read_all(check)] == [b"f%d" % i for i in range(5)]
    await check.close()


async def test_entry_given_as_parts_is_one_entry(make_log: LogMaker) -> None:
    """An entry may be handed over as a list of buffers: it is stored (and CRC-checked)
    as their concatenation, one entry with one address."""
    log = make_log()
    await log.open()
    parts = [b"head", memoryview(b"-middle-"), bytearray(b"tail"), b""]
    a = await log.append(parts)
    b = await log.append_future([b"second"])
    c = await log.append(b"plain")
    await log.close()
    check = make_log()
    await check.open()
    assert await _read_all(check) == [(a, b"head-middle-tail"), (b, b"second"), (c, b"plain")]
    await check.close()


async def test_on_done_follows_each_completion_once_in_order(make_log: LogMaker) -> None:
    """``append_future(entry, on_done)`` calls ``on_done`` once per append, with its
    future already done and never before ``append_future`` returned, in append order;
    a refused append calls it too."""
    log = make_log()
    await log.open()
    returned: set[int] = set()
    calls: list[tuple[asyncio.Future[LogAddress], bool, bool]] = []

    def on_done(fut: asyncio.Future[LogAddress]) -> None:
        calls.append((fut, fut.done(), id(fut) in returned))

    futs = []
    for i in range(6):
        fut = log.append_future(b"e%d" % i, on_done)
        returned.add(id(fut))
        futs.append(fut)
    await asyncio.gather(*futs)
    await log.close()
    refused = log.append_future(b"closed", on_done)
    returned.add(id(refused))
    with pytest.raises(DataLogClosedError):
        await refused
    await asyncio.sleep(0)  # a log may schedule it as an ordinary done callback
    assert calls == [(f, True, True) for f in [*futs, refused]]
