"""A controller process for the ``kill -9`` tests (``test_crash_process.py``).

``python -m tests.controller.crash_worker DATA_DIR work SEED KILL_AT``: open the durable
segment store in ``DATA_DIR``, start a controller (which finishes any interrupted
workflow), create scope ``s`` and stream ``t`` if missing, print ``ready``, then loop:
append to every current segment, scale (split or merge), truncate at an earlier tail
cut, printing ``done <op>`` after each. With ``KILL_AT >= 0`` the process sends itself
SIGKILL instead of making its ``KILL_AT``-th segment-store mutation after ``ready``.

``python -m tests.controller.crash_worker DATA_DIR check``: report the workflow recorded
for ``s/t`` before recovery, start a controller (recovery), check the stream is
consistent, and print one JSON line; exit status 1 on any inconsistency.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

from tidegate.core.controller.api import (
    KeyRange,
    ScalingPolicy,
    StreamConfig,
    StreamExistsError,
    StreamState,
    qualified_segment_name,
)
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.history import History
from tidegate.core.controller.keyspace import is_cover, split
from tidegate.core.controller.metadata import MetadataStore, StreamMeta
from tidegate.core.segmentstore.api import SegmentNotFoundError, SegmentStore
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore

CONFIG = ControllerConfig(
    autoscale_period_ms=0,
    retention_period_ms=0,
    txn_timeout_check_period_ms=0,
    watermark_period_ms=0,
)
MUTATING = {
    "create_segment",
    "append",
    "seal",
    "truncate",
    "merge",
    "delete_segment",
    "create_table",
    "delete_table",
    "table_put",
    "table_remove",
    "update_attributes",
}


class KillingStore:
    """Kills the process (SIGKILL) instead of making mutation number ``kill_at``."""

    def __init__(self, inner: SegmentStore) -> None:
        self.inner = inner
        self.kill_at = -1
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in MUTATING:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.kill_at >= 0:
                if self.calls == self.kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                self.calls += 1
            return await attr(*args, **kwargs)

        return call


def open_store(data_dir: str) -> StreamSegmentStore:
    return StreamSegmentStore(Path(data_dir), SegmentStoreConfig(container_count=2))


async def work(data_dir: str, seed: int, kill_at: int) -> None:
    rng = random.Random(seed)
    store = open_store(data_dir)
    await store.start()
    killing = KillingStore(store)
    ctl = StreamController(killing, CONFIG)  # type: ignore[arg-type]
    await ctl.start()
    if "s" not in await ctl.list_scopes():
        await ctl.create_scope("s")
    try:
        await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=2)))
    except StreamExistsError:
        pass
    print("ready", flush=True)
    killing.kill_at = kill_at
    cuts: list[dict[int, int]] = []
    while True:
        segs = await ctl.get_current_segments("s", "t")
        for s in segs:
            await store.append(
                qualified_segment_name("s", "t", s.id), os.urandom(rng.randint(1, 300))
            )
        cuts.append(await ctl.get_tail_cut("s", "t"))
        i = rng.randrange(len(segs))
        if len(segs) > 2 and rng.random() < 0.5 and i + 1 < len(segs):
            a, b = segs[i], segs[i + 1]
            await ctl.scale("s", "t", [a.id, b.id], [KeyRange(a.key_start, b.key_end)])
            print("done merge", flush=True)
        else:
            s = segs[i]
            await ctl.scale("s", "t", [s.id], split(s.key_start, s.key_end, 2))
            print("done split", flush=True)
        if len(cuts) >= 2:
            await ctl.truncate("s", "t", cuts[-2])
            print("done truncate", flush=True)


async def check(data_dir: str) -> int:
    store = open_store(data_dir)
    await store.start()
    md = MetadataStore(store, CONFIG.metadata_prefix)
    meta = StreamMeta(md, "s", "t")
    try:
        pending = (await meta.workflow()).value
    except SegmentNotFoundError:
        pending = None
    ctl = StreamController(store, CONFIG)
    await ctl.start()
    problems: list[str] = []
    info = await ctl.get_stream("s", "t")
    if info.state != StreamState.ACTIVE:
        problems.append(f"state {info.state}")
    if (await meta.workflow()).value is not None:
        problems.append("workflow still recorded")
    epochs = await ctl.get_epochs("s", "t")
    for e in epochs:
        if not is_cover([s.key_range for s in e.segments]):
            problems.append(f"epoch {e.epoch} is not a cover")
    head = await ctl.get_head_segments("s", "t")
    trunc = await meta.truncation()
    gone = History(epochs).before(trunc.cut) if trunc else set()
    sealed = await ctl.get_sealed_sizes("s", "t")
    current = {s.id for s in epochs[-1].segments}
    for seg_id in {s.id for e in epochs for s in e.segments}:
        name = qualified_segment_name("s", "t", seg_id)
        try:
            props = await store.get_info(name)
        except SegmentNotFoundError:
            if seg_id not in gone:
                problems.append(f"segment {seg_id} missing")
            continue
        if seg_id in gone:
            problems.append(f"segment {seg_id} should be deleted")
        if props.sealed != (seg_id not in current):
            problems.append(f"segment {seg_id} sealed={props.sealed}")
        if seg_id in sealed and props.length != sealed[seg_id]:
            problems.append(
                f"segment {seg_id} length {props.length} != sealed size {sealed[seg_id]}"
            )
        if seg_id in head and props.start_offset != head[seg_id]:
            problems.append(
                f"segment {seg_id} starts at {props.start_offset}, head says {head[seg_id]}"
            )
    # the stream still works: one more scale and truncate
    segs = await ctl.get_current_segments("s", "t")
    await ctl.scale("s", "t", [segs[0].id], split(segs[0].key_start, segs[0].key_end, 2))
    await ctl.truncate("s", "t", await ctl.get_tail_cut("s", "t"))
    print(
        json.dumps(
            {"pending": pending and pending["type"], "epochs": len(epochs), "problems": problems}
        ),
        flush=True,
    )
    await ctl.close()
    await store.close()
    return 1 if problems else 0


def main() -> None:
    data_dir, mode = sys.argv[1], sys.argv[2]
    if mode == "work":
        asyncio.run(work(data_dir, int(sys.argv[3]), int(sys.argv[4])))
    else:
        sys.exit(asyncio.run(check(data_dir)))


if __name__ == "__main__":
    main()
