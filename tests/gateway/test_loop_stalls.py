"""What kept the event loop busy for hundreds of milliseconds while CreatePartitions grew a
topic to 10,000 partitions (issue 22, finding 4; figures in bench/RESULTS.md): the split
and the scale's plan, the encoding of epoch records of thousands of segments, and full
garbage collections scanning every long-lived object. The first three now run in worker
threads; ``gateway.heap`` freezes the survivors of each full collection."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from tidegate.core.controller import metadata
from tidegate.core.controller.workflows import scale
from tidegate.gateway import heap
from tidegate.gateway.handlers import create_partitions

from tests.gateway.conftest import Node


def _recording(fn: Any, threads: list[str]) -> Any:
    def wrapper(*args: Any, **kw: Any) -> Any:
        threads.append(threading.current_thread().name)
        return fn(*args, **kw)

    return wrapper


async def test_split_plan_and_large_records_run_off_the_loop(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: dict[str, list[str]] = {"split": [], "plan": [], "dumps": []}
    monkeypatch.setattr(create_partitions, "split_ranges",
                        _recording(create_partitions.split_ranges, threads["split"]))
    monkeypatch.setattr(scale, "plan", _recording(scale.plan, threads["plan"]))
    real_dumps = metadata.dumps

    def dumps(value: Any) -> bytes:
        if isinstance(value, dict) and len(value.get("segments", ())) > metadata.LARGE_ITEMS:
            threads["dumps"].append(threading.current_thread().name)
        return real_dumps(value)

    monkeypatch.setattr(metadata, "dumps", dumps)
    gw = node.gateway
    assert gw is not None and gw.ctx is not None
    info = await gw.ctx.topics.create("grow", 300)
    assert info is not None
    await create_partitions.add_partitions(gw.ctx, info, 600)
    assert len(await node.controller.get_current_segments("kafka", "grow")) == 600
    loop_thread = threading.main_thread().name
    assert threads["split"] and loop_thread not in threads["split"], threads
    assert threads["plan"] and loop_thread not in threads["plan"], threads
    assert threads["dumps"] and loop_thread not in threads["dumps"], threads


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    threshold = gc.get_threshold()
    heap.freeze_long_lived()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(heap._freeze_survivors)
        gc.unfreeze()
        gc.collect()


class _Cyclic:
    def __init__(self) -> None:
        self.me = self


def test_full_collections_leave_only_new_objects_to_scan(frozen_heap: None) -> None:
    frozen = gc.get_freeze_count()  # (full collections may come while these are made)
    long_lived = [[i] for i in range(50_000)]
    gc.collect()
    # The survivors (``long_lived`` among them) are frozen: the next full collection
    # does not scan them again.
    assert gc.get_freeze_count() >= frozen + len(long_lived)
    assert len(gc.get_objects(2)) < 1000
    # Full collections come every FULL_EVERY middle ones: each scans less.
    assert gc.get_threshold()[2] == heap.FULL_EVERY
    # Cycles made since are still collected.
    c = _Cyclic()
    ref = weakref.ref(c)
    del c
    gc.collect()
    assert ref() is None
    del long_lived
