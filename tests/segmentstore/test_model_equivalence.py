"""Property test: random interleavings of segment and table operations give the same
results on ``StreamSegmentStore`` as on the reference ``InMemorySegmentStore``,
including across restarts (recovery from Tier-1 + Tier-2), Tier-2 flushes with Tier-1
truncation, a cache far smaller than the data (evictions, Tier-1/Tier-2 reads), and
segments leaving memory and coming back (inactive segments)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    AttributeUpdate,
    SegmentStoreError,
    TableRemoval,
    TableUpdate,
)
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.core.segmentstore.service import container_of

from tests.segmentstore.helpers import SMALL, Backings

# Segment names in one container (merges need that), plus one in the other container.
_same = [n for n in (f"s{i}" for i in range(100)) if container_of(n, SMALL.container_count) == 0]
SEGS = _same[:3] + [next(f"x{i}" for i in range(100) if container_of(f"x{i}", 2) == 1)]
TABLES = ["t0", "t1"]
KEYS = [b"a", b"ab", b"b", b"c"]

seg = st.sampled_from(SEGS)
table = st.sampled_from(TABLES)
key = st.sampled_from(KEYS)
cond = st.sampled_from([None, None, "current", "absent", "stale"])

append = st.tuples(
    st.just("append"), seg, st.integers(0, 3000), st.sampled_from([None, None, "right", "wrong"])
)
put = st.tuples(st.just("put"), table, st.lists(st.tuples(key, st.binary(max_size=300), cond), max_size=3))
ops = st.one_of(
    append,
    append,
    append,
    put,
    put,
    st.tuples(st.just("create"), seg | table),
    st.tuples(st.just("create_table"), table | seg),
    st.tuples(st.just("append_attr"), seg, st.integers(1, 50), st.sampled_from(["right", "wrong", "absent"])),
    st.tuples(st.just("read"), seg, st.floats(0, 1.2), st.integers(0, 5000)),
    st.tuples(st.just("info"), seg),
    st.tuples(st.just("seal"), seg),
    st.tuples(st.just("truncate"), seg, st.floats(-0.2, 1.2)),
    st.tuples(st.just("merge"), seg, seg),
    st.tuples(st.just("delete"), seg | table),
    st.tuples(st.just("remove"), table, st.lists(st.tuples(key, cond), max_size=3)),
    st.tuples(st.just("get"), table, st.lists(key, max_size=3)),
    st.tuples(st.just("entries"), table, st.sampled_from([b"", b"a", b"b"])),
    st.tuples(st.just("restart")),
    st.tuples(st.just("flush")),
    st.tuples(st.just("evict")),
)


async def _version(s: Any, t: str, k: bytes) -> int:
    try:
        e = (await s.table_get(t, [k]))[0]
    except SegmentStoreError:
        return NOT_EXISTS
    return NOT_EXISTS if e is None else int(e.version)


async def _expected(s: Any, t: str, k: bytes, c: str | None) -> int | None:
    if c is None:
        return None
    if c == "absent":
        return NOT_EXISTS
    v = await _version(s, t, k)
    return v if c == "current" else v + 1_000_003


async def run(s: Any, op: tuple[Any, ...], data_tag: int) -> Any:
    kind = op[0]
    if kind == "create":
        return await s.create_segment(op[1], {"c": 1})
    if kind == "create_table":
        return await s.create_table(op[1])
    if kind == "append":
        _, name, size, exp = op
        data = bytes([data_tag % 251]) * size
        offset = None
        if exp is not None:
            try:
                length = (await s.get_info(name)).length
            except SegmentStoreError:
                length = 0
            offset = length if exp == "right" else length + 1
        return await s.append(name, data, expected_offset=offset)
    if kind == "append_attr":
        _, name, value, how = op
        try:
            cur = (await s.get_info(name)).attributes.get("p", NOT_EXISTS)
        except SegmentStoreError:
            cur = NOT_EXISTS
        expected = {"right": cur, "wrong": cur + 7, "absent": NOT_EXISTS}[how]
        return await s.append(name, b"A" * value, attribute_updates=[AttributeUpdate("p", value, expected)])
    if kind == "read":
        _, name, frac, n = op
        try:
            info = await s.get_info(name)
            offset = int(info.length * frac)
        except SegmentStoreError:
            offset = 0
        r = await s.read(name, offset, n)
        return (r.offset, b"".join(bytes(c) for c in r.chunks), r.end_of_segment)
    if kind == "info":
        i = await s.get_info(op[1])
        return (i.length, i.start_offset, i.sealed, dict(i.attributes))
    if kind == "seal":
        return await s.seal(op[1])
    if kind == "truncate":
        _, name, frac = op
        try:
            info = await s.get_info(name)
            offset = int(info.length * frac)
        except SegmentStoreError:
            offset = 0
        return await s.truncate(name, offset)
    if kind == "merge":
        return await s.merge(op[1], op[2])
    if kind == "delete":
        if op[1] in TABLES:
            return await s.delete_table(op[1])
        return await s.delete_segment(op[1])
    if kind == "put":
        ups = [TableUpdate(k, v, await _expected(s, op[1], k, c)) for k, v, c in op[2]]
        versions = await s.table_put(op[1], ups)
        return len(versions)
    if kind == "remove":
        rems = [TableRemoval(k, await _expected(s, op[1], k, c)) for k, c in op[2]]
        return await s.table_remove(op[1], rems)
    if kind == "get":
        return [None if e is None else e.value for e in await s.table_get(op[1], op[2])]
    if kind == "entries":
        return [(e.key, e.value) for e in await s.table_entries(op[1], op[2])]
    raise AssertionError(kind)


def _skip(model: InMemorySegmentStore, op: tuple[Any, ...]) -> bool:
    """Cases where the store deliberately differs from the model: merging a segment
    into itself or across containers, or merging a truncated source (Tier-2 cannot
    concatenate it)."""
    if op[0] != "merge":
        return False
    if op[1] == op[2]:
        return True
    if container_of(op[1], 2) != container_of(op[2], 2) and (
        op[1] in model._segments and op[2] in model._segments
    ):
        return True
    src = model._segments.get(op[2])
    return src is not None and src.start_offset > 0


async def scenario(steps: list[tuple[Any, ...]]) -> None:
    model = InMemorySegmentStore()
    backings = Backings()
    with tempfile.TemporaryDirectory() as tmp:
        # Segments idle for 1 ms leave memory: the writer's rounds (every 1 ms) and
        # "evict" steps make them inactive at random points, and calls bring them back.
        cfg = dict(cache_bytes_max=16 * 1024, segment_idle_ms=1, segment_evict_interval_ms=1)
        real = backings.store(Path(tmp), **cfg)
        await real.start()
        try:
            for s in (model, real):
                for name in SEGS:
                    await s.create_segment(name)
                for name in TABLES:
                    await s.create_table(name)
            for i, op in enumerate(steps):
                if op[0] == "restart":
                    await real.close()
                    real = backings.store(Path(tmp), **cfg)
                    await real.start()
                    continue
                if op[0] == "flush":
                    await real.flush_to_storage()
                    continue
                if op[0] == "evict":
                    for c in real.containers.values():
                        await c.writer.evict_now()
                    continue
                if _skip(model, op):
                    continue
                results = []
                for s in (model, real):
                    try:
                        results.append(("ok", await run(s, op, i)))
                    except SegmentStoreError as exc:
                        results.append(("error", type(exc).__name__))
                assert results[0] == results[1], (i, op, results)
            # Final state: every segment and table reads back the same.
            for name in SEGS:
                a = await _dump(model, name)
                b = await _dump(real, name)
                assert a == b, name
        finally:
            await real.close()


async def _dump(s: Any, name: str) -> Any:
    try:
        info = await s.get_info(name)
    except SegmentStoreError as exc:
        return type(exc).__name__
    r = await s.read(name, info.start_offset, 1 << 30)
    return (info.length, info.start_offset, info.sealed, b"".join(bytes(c) for c in r.chunks))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=5, max_size=60))
def test_store_matches_model(steps: list[tuple[Any, ...]]) -> None:
    asyncio.run(scenario(steps))
