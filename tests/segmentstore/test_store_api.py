"""The SegmentStore API on ``StreamSegmentStore`` (in-memory Tier-1/Tier-2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    AttributeUpdate,
    BadAttributeUpdateError,
    BadKeyVersionError,
    BadOffsetError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    TableNotEmptyError,
    TableRemoval,
    TableUpdate,
    TooLargeError,
)
from tidegate.core.segmentstore.service import StreamSegmentStore

from tests.segmentstore.helpers import Backings


async def read_all(s: StreamSegmentStore, name: str, offset: int = 0) -> bytes:
    r = await s.read(name, offset, 1 << 30)
    return b"".join(bytes(c) for c in r.chunks)


async def test_append_read_info(store: StreamSegmentStore) -> None:
    await store.create_segment("s", {"a": 1})
    assert await store.append("s", b"hello") == 0
    assert await store.append("s", memoryview(b" world")) == 5
    assert await read_all(store, "s") == b"hello world"
    assert await read_all(store, "s", 6) == b"world"
    info = await store.get_info("s")
    assert (info.length, info.start_offset, info.sealed, dict(info.attributes)) == (11, 0, False, {"a": 1})
    r = await store.read("s", 11, 10)
    assert r.length == 0 and not r.end_of_segment


async def test_concurrent_appends_keep_call_order(store: StreamSegmentStore) -> None:
    await store.create_segment("s")
    # Ordering contract: operations are queued before the first await, so the gather
    # order (creation order of the coroutines, started in order) is the log order.
    coros = [store.append("s", bytes([i]) * (i + 1)) for i in range(50)]
    offsets = await asyncio.gather(*coros)
    expect = 0
    for i, off in enumerate(offsets):
        assert off == expect
        expect += i + 1
    data = await read_all(store, "s")
    assert data == b"".join(bytes([i]) * (i + 1) for i in range(50))


async def test_rejected_append_does_not_affect_earlier_ones(store: StreamSegmentStore) -> None:
    await store.create_segment("s")
    t1 = asyncio.ensure_future(store.append("s", b"one"))
    t2 = asyncio.ensure_future(store.append("s", b"bad", expected_offset=99))
    t3 = asyncio.ensure_future(store.seal("s"))
    t4 = asyncio.ensure_future(store.append("s", b"late"))
    res = await asyncio.gather(t1, t2, t3, t4, return_exceptions=True)
    assert res[0] == 0
    assert isinstance(res[1], BadOffsetError) and res[1].actual == 3
    assert res[2] == 3
    assert isinstance(res[3], SegmentSealedError)
    assert await read_all(store, "s") == b"one"


async def test_typed_errors_leave_data_untouched(store: StreamSegmentStore) -> None:
    await store.create_segment("s")
    await store.append("s", b"abcdef")
    with pytest.raises(SegmentExistsError):
        await store.create_segment("s")
    with pytest.raises(SegmentNotFoundError):
        await store.append("nope", b"x")
    with pytest.raises(BadOffsetError):
        await store.read("s", 7, 1)
    await store.truncate("s", 2)
    with pytest.raises(SegmentTruncatedError):
        await store.read("s", 1, 1)
    with pytest.raises(BadOffsetError):
        await store.truncate("s", 1)
    with pytest.raises(BadOffsetError):
        await store.truncate("s", 7)
    with pytest.raises(BadAttributeUpdateError):
        await store.append("s", b"zz", attribute_updates=[AttributeUpdate("p", 1, expected=5)])
    with pytest.raises(TooLargeError):
        await store.append("s", bytes(store.config.append_bytes_max + 1))
    assert await read_all(store, "s", 2) == b"cdef"
    assert (await store.get_info("s")).attributes == {}
    await store.seal("s")
    assert await store.seal("s") == 6
    with pytest.raises(SegmentSealedError):
        await store.append("s", b"x")
    with pytest.raises(SegmentSealedError):
        await store.update_attributes("s", [AttributeUpdate("k", 1)])
    r = await store.read("s", 6, 10)
    assert r.end_of_segment and r.length == 0
    await store.delete_segment("s")
    with pytest.raises(SegmentNotFoundError):
        await store.append("s", b"x")
    with pytest.raises(SegmentNotFoundError):
        await store.read("s", 0, 1)
    with pytest.raises(SegmentNotFoundError):
        await store.delete_segment("s")


async def test_attributes_with_append_are_atomic(store: StreamSegmentStore) -> None:
    await store.create_segment("s")
    await store.append("s", b"a", attribute_updates=[AttributeUpdate("seq", 1, expected=NOT_EXISTS)])
    with pytest.raises(BadAttributeUpdateError):
        await store.append("s", b"b", attribute_updates=[AttributeUpdate("seq", 2, expected=0)])
    await store.append("s", b"c", attribute_updates=[AttributeUpdate("seq", 2, expected=1)])
    assert await read_all(store, "s") == b"ac"
    assert (await store.get_info("s")).attributes == {"seq": 2}
    await store.update_attributes("s", [AttributeUpdate("x", 7)])
    assert (await store.get_info("s")).attributes == {"seq": 2, "x": 7}


async def test_tail_read_waits_for_data(store: StreamSegmentStore) -> None:
    await store.create_segment("s")
    reader = asyncio.ensure_future(store.read("s", 0, 100, timeout_ms=5000))
    await asyncio.sleep(0.01)
    assert not reader.done()
    await store.append("s", b"data")
    r = await reader
    assert b"".join(bytes(c) for c in r.chunks) == b"data"
    r = await store.read("s", 4, 100, timeout_ms=20)
    assert r.length == 0
    reader = asyncio.ensure_future(store.read("s", 4, 100, timeout_ms=5000))
    await asyncio.sleep(0.01)
    await store.seal("s")
    r = await reader
    assert r.length == 0 and r.end_of_segment


async def test_merge(store: StreamSegmentStore) -> None:
    # Names that hash to the same container (the store requires it for merges).
    names = [f"seg{i}" for i in range(40)]
    c0 = [n for n in names if store.container_for(n) is store.container_for(names[0])]
    target, source, other = c0[0], c0[1], c0[2]
    await store.create_segment(target)
    await store.create_segment(source)
    await store.create_segment(other)
    await store.append(target, b"T" * 10)
    await store.append(source, b"S" * 5)
    assert await store.merge(target, source) == 10
    with pytest.raises(SegmentNotFoundError):
        await store.get_info(source)
    with pytest.raises(SegmentNotFoundError):
        await store.merge(other, source)  # conflicting second merge of the same source
    assert await read_all(store, target) == b"T" * 10 + b"S" * 5
    await store.append(target, b"!")
    await asyncio.sleep(0.2)  # the writer concatenates in Tier-2
    await store.flush_to_storage()
    assert (await store.get_info(target)).storage_length == 16
    assert await read_all(store, target) == b"T" * 10 + b"S" * 5 + b"!"
    await store.seal(other)
    with pytest.raises(SegmentSealedError):
        await store.merge(other, target)


async def test_tables(store: StreamSegmentStore) -> None:
    await store.create_table("t")
    with pytest.raises(SegmentExistsError):
        await store.create_segment("t")
    v = await store.table_put("t", [TableUpdate(b"a", b"1"), TableUpdate(b"b", b"2", NOT_EXISTS)])
    assert v[0] < v[1]
    with pytest.raises(BadKeyVersionError):
        await store.table_put("t", [TableUpdate(b"c", b"3"), TableUpdate(b"a", b"x", v[1])])
    assert await store.table_get("t", [b"a", b"c"]) == [
        (await store.table_entries("t", b"a"))[0],
        None,
    ]
    v2 = await store.table_put("t", [TableUpdate(b"a", b"10", v[0])])
    assert v2[0] > v[1]
    await store.table_remove("t", [TableRemoval(b"zz")])
    with pytest.raises(BadKeyVersionError):
        await store.table_remove("t", [TableRemoval(b"b", v[0])])
    with pytest.raises(TableNotEmptyError):
        await store.delete_table("t", must_be_empty=True)
    await store.table_remove("t", [TableRemoval(b"b", v[1])])
    entries = await store.table_entries("t")
    assert [(e.key, e.value) for e in entries] == [(b"a", b"10")]
    with pytest.raises(SegmentNotFoundError):
        await store.append("t", b"x")
    await store.delete_table("t")
    with pytest.raises(SegmentNotFoundError):
        await store.table_get("t", [b"a"])


async def test_table_compaction_keeps_contents(backings: Backings, tmp_path: Path) -> None:
    s = backings.store(tmp_path)
    await s.start()
    await s.create_table("t")
    versions = {}
    for i in range(300):
        k = b"k%d" % (i % 7)
        versions[k] = (await s.table_put("t", [TableUpdate(k, b"v%d" % i)]))[0]
    c = s.container_for("t")
    meta = c.md.readable("t", is_table=True)
    assert meta.start_offset > 0  # compacted at least once
    assert meta.length - meta.start_offset < 4 * 2048
    before = {e.key: (e.value, e.version) for e in await s.table_entries("t")}
    assert {k: v for k, (_, v) in before.items()} == versions
    await s.close()
    s = backings.store(tmp_path)
    await s.start()
    after = {e.key: (e.value, e.version) for e in await s.table_entries("t")}
    assert after == before
    await s.close()


async def test_recovery_restores_everything(backings: Backings, tmp_path: Path) -> None:
    s = backings.store(tmp_path)
    await s.start()
    await s.create_segment("a", {"x": 1})
    await s.create_segment("b")
    for i in range(100):
        await s.append("a" if i % 2 else "b", bytes([i]) * 300)
    await s.truncate("b", 600)
    await s.seal("a")
    await s.create_table("t")
    await s.table_put("t", [TableUpdate(b"k", b"v")])
    epochs = {cid: c.epoch for cid, c in s.containers.items()}
    seqs = {cid: c.md.seq for cid, c in s.containers.items()}
    a = await read_all(s, "a")
    b = await read_all(s, "b", 600)
    await s.close()
    s = backings.store(tmp_path)
    await s.start()
    assert await read_all(s, "a") == a
    assert await read_all(s, "b", 600) == b
    ia = await s.get_info("a")
    assert ia.sealed and ia.attributes == {"x": 1}
    assert (await s.get_info("b")).start_offset == 600
    assert [e.value for e in await s.table_entries("t")] == [b"v"]
    for cid, c in s.containers.items():
        assert c.epoch > epochs[cid]
        assert c.md.seq >= seqs[cid]
    await s.close()


async def test_ordering_contract_queue_before_first_await(store: StreamSegmentStore) -> None:
    """Every mutating call queues its operation before its first await: tasks started
    in some order land in the log in that order, whatever their sizes, and a call that
    fails validation in between changes nothing for the others."""
    await store.create_segment("s")
    sizes = [70_000, 1, 5000, 3, 200_000, 10]
    tasks = []
    for i, n in enumerate(sizes):
        tasks.append(asyncio.ensure_future(store.append("s", bytes([i]) * n)))
        if i == 2:
            tasks.append(asyncio.ensure_future(store.append("s", b"x", expected_offset=1)))
    res = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(res[3], BadOffsetError)
    offsets = [r for r in res if isinstance(r, int)]
    assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]
    # The queueing happens in the coroutine's first step, before any suspension:
    coro = store.append("s", b"!")
    step = coro.send(None)  # runs up to its first await (the durable-log future)
    c = store.container_for("s")
    assert c.md.by_name["s"].p_length == sum(sizes) + 1
    assert isinstance(step, asyncio.Future)
    coro.close()  # the operation stays queued; it commits without a caller
    await asyncio.sleep(0.05)
    assert (await store.get_info("s")).length == sum(sizes) + 1


async def test_container_not_owned(backings: Backings, tmp_path: Path) -> None:
    from tidegate.core.segmentstore.api import ContainerNotOwnedError
    from tidegate.core.segmentstore.service import container_of

    s = backings.store(tmp_path, owned_containers=(0,))
    await s.start()
    foreign = next(n for n in (f"n{i}" for i in range(100)) if container_of(n, 2) == 1)
    mine = next(n for n in (f"n{i}" for i in range(100)) if container_of(n, 2) == 0)
    with pytest.raises(ContainerNotOwnedError):
        await s.create_segment(foreign)
    with pytest.raises(ContainerNotOwnedError):
        await s.read(foreign, 0, 1)
    await s.create_segment(mine)
    assert await s.append(mine, b"ok") == 0
    await s.close()


async def test_transaction_segments_share_their_parents_container(backings: Backings, tmp_path: Path) -> None:
    from tidegate.core.segmentstore.config import SegmentStoreConfig
    from tidegate.core.segmentstore.service import container_of

    s = backings.store(tmp_path, SegmentStoreConfig(container_count=4))
    await s.start()
    parent = "sc/st/3.#epoch.0"
    dup = "sc/st/3.#epoch.2"  # the parent's duplicate in a rolling transaction
    for txn in ("sc/st/3.#epoch.0#transaction.abc", "sc/st/3.#epoch.2#transaction.abc"):
        assert container_of(txn, 4) == container_of(parent, 4) == container_of(dup, 4)
    await s.create_segment(parent)
    await s.create_segment(dup)
    await s.create_segment(parent + "#transaction.t1")
    await s.create_segment(dup + "#transaction.t1")
    await s.append(parent + "#transaction.t1", b"one")
    await s.append(dup + "#transaction.t1", b"two")
    assert await s.merge(parent, parent + "#transaction.t1") == 0
    assert await s.merge(dup, dup + "#transaction.t1") == 0
    assert (await s.get_info(dup)).length == 3
    spread = {container_of(f"sc/st/{i}.#epoch.0", 4) for i in range(40)}
    assert spread == {0, 1, 2, 3}
    await s.close()


async def test_stats(store: StreamSegmentStore) -> None:
    await store.create_segment("s")
    await store.append("s", b"x" * 100)
    st = store.stats()
    containers = st["containers"]
    assert isinstance(containers, dict) and len(containers) == 2
    assert all(c["state"] == "running" and c["epoch"] >= 1 for c in containers.values())
    assert sum(c["segments"] for c in containers.values()) == 1


async def test_append_buffer_kinds(store: StreamSegmentStore) -> None:
    """Writable buffers are copied (later changes by the caller do not leak in), other
    formats count bytes, read-only byte views are kept as they are."""
    import array

    await store.create_segment("s")
    buf = bytearray(b"abcd")
    await store.append("s", memoryview(buf))
    buf[:] = b"XXXX"
    ints = array.array("i", [1, 2])
    assert await store.append("s", memoryview(ints)) == 4
    ro = memoryview(bytearray(b"tail")).toreadonly()
    assert await store.append("s", ro) == 4 + ints.itemsize * 2
    data = await read_all(store, "s")
    assert data == b"abcd" + ints.tobytes() + b"tail"


async def test_append_on_done_runs_in_the_turn_tier1_completes(tmp_path: Path) -> None:
    """``append_future``'s ``on_done`` is called from the Tier-1 completion itself: the
    durable log and the container pass it on without an event-loop hop each. A refused
    append calls it too (scheduled), with the error."""
    from tidegate.core.segmentstore.tier1.filelog import FileDurableDataLog
    from tidegate.tier2.inmemory import InMemoryStorage

    from tests.segmentstore.helpers import SMALL

    inside: list[bool] = []

    def tier1(cid: int) -> FileDurableDataLog:
        log = FileDurableDataLog(tmp_path / f"t1-{cid}")
        on_written = log._on_written

        def tracked(*args: object) -> None:
            inside.append(True)
            try:
                on_written(*args)  # type: ignore[arg-type]
            finally:
                inside.pop()

        log._on_written = tracked  # type: ignore[method-assign]
        return log

    s = StreamSegmentStore(tmp_path / "store", SMALL, tier1_factory=tier1, tier2=InMemoryStorage())
    await s.start()
    try:
        await s.create_segment("a")
        calls: list[tuple[bool, object]] = []

        def on_done(fut: asyncio.Future[int]) -> None:
            calls.append((bool(inside), fut.exception() or fut.result()))

        futs = [s.append_future("a", b"x" * 10, on_done=on_done) for _ in range(3)]
        assert await asyncio.gather(*futs) == [0, 10, 20]
        assert calls == [(True, 0), (True, 10), (True, 20)]
        calls.clear()
        with pytest.raises(SegmentNotFoundError):
            await s.append_future("missing", b"x", on_done=on_done)
        await asyncio.sleep(0)
        assert len(calls) == 1 and isinstance(calls[0][1], SegmentNotFoundError)
    finally:
        await s.close()
