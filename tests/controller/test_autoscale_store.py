"""Auto-scaling end to end on the durable segment store: appends above the target rate
into one segment make the controller split it; when the traffic stops, the cold
neighbours are merged back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tidegate.core.controller.api import (
    ScalingPolicy,
    ScalingType,
    StreamConfig,
    qualified_segment_name,
)
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.keyspace import is_cover
from tidegate.core.segmentstore.api import SegmentSealedError
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore


async def test_split_under_load_then_merge_when_idle(tmp_path: Path) -> None:
    store = StreamSegmentStore(
        tmp_path, SegmentStoreConfig(container_count=2, traffic_window_ms=300)
    )
    await store.start()
    config = ControllerConfig(
        autoscale_period_ms=100,
        autoscale_cooldown_ms=600,
        retention_period_ms=0,
        txn_timeout_check_period_ms=0,
        watermark_period_ms=0,
    )
    ctl = StreamController(store, config)
    await ctl.start()
    try:
        await ctl.create_scope("s")
        policy = ScalingPolicy(
            ScalingType.BY_RATE_IN_EVENTS_PER_SEC, target_rate=50, scale_factor=2, min_segments=1
        )
        await ctl.create_stream("s", "t", StreamConfig(scaling=policy))

        # ~300 events/s at routing key 0.25, always into whichever segment holds it now
        deadline = time.monotonic() + 60
        while len(await ctl.get_current_segments("s", "t")) < 2:
            assert time.monotonic() < deadline, "no split under load"
            seg = await ctl.get_segment_for_key("s", "t", 0.25)
            try:
                for _ in range(3):
                    await store.append(qualified_segment_name("s", "t", seg.id), b"e" * 100)
            except SegmentSealedError:
                pass  # sealed by the scale under way: a writer asks for the new segment
            await asyncio.sleep(0.01)
        split_epochs = await ctl.get_epochs("s", "t")
        assert [(s.key_start, s.key_end) for s in split_epochs[1].segments] == [
            (0.0, 0.5),
            (0.5, 1.0),
        ]

        # no traffic: the two halves go cold and are merged back into one
        deadline = time.monotonic() + 60
        while len(await ctl.get_current_segments("s", "t")) > 1:
            assert time.monotonic() < deadline, "no merge when idle"
            await asyncio.sleep(0.05)
        epochs = await ctl.get_epochs("s", "t")
        assert [(s.key_start, s.key_end) for s in epochs[-1].segments] == [(0.0, 1.0)]
        for e in epochs:
            assert is_cover([s.key_range for s in e.segments])
    finally:
        await ctl.close()
        await store.close()
