"""Auto-scaling from segment traffic.

For each active stream with a rate policy, each current segment older than
``autoscale_cooldown_ms`` is compared with the policy's ``target_rate`` (KB/s or
events/s, from the traffic source's smoothed figures):

* above the target it is hot, and every hot segment is split at once into
  ``scale_factor`` equal key ranges (one scale for all of them);
* below ``target_rate * autoscale_cold_fraction`` it is marked cold in the stream's
  metadata (``cold/<id>``); a mark is cleared when the segment is no longer cold;
* two neighbouring segments (sharing a key-range bound) that are both marked cold are
  merged into one, pair by pair, as long as the stream keeps ``min_segments``.

A split takes precedence over merges in the same round. A scale that loses a race with
another workflow is simply retried next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.controller.api import (
    ConflictError,
    KeyRange,
    ScalingType,
    SegmentRecord,
    StreamConfig,
    StreamState,
    qualified_segment_name,
)
from core.controller.keyspace import split
from core.controller.metadata import StreamMeta, seg_key
from core.segmentstore.api import SegmentTraffic

if TYPE_CHECKING:
    from core.controller.controller import StreamController

log = logging.getLogger(__name__)


class AutoScaler:
    def __init__(self, ctl: StreamController, traffic: Callable[[str], SegmentTraffic]) -> None:
        self.ctl = ctl
        self.traffic = traffic

    def rate(self, config: StreamConfig, name: str) -> float:
        t = self.traffic(name)
        if config.scaling.type == ScalingType.BY_RATE_IN_KBYTES_PER_SEC:
            return t.bytes_per_second / 1024
        return t.events_per_second

    async def run_once(self) -> None:
        for scope, stream in await self.ctl.streams_with_state():
            try:
                await self.check(scope, stream)
            except ConflictError:
                pass  # another workflow holds the stream; next round
            except Exception:
                log.exception("auto-scaling %s/%s", scope, stream)

    async def check(self, scope: str, stream: str) -> None:
        meta: StreamMeta = await self.ctl.stream_meta(scope, stream)
        config = await meta.config()
        policy = config.scaling
        if policy.type == ScalingType.FIXED_NUM_SEGMENTS:
            return
        state, _ = await meta.state()
        if state != StreamState.ACTIVE:
            return
        now = self.ctl.now_ms()
        segments = list((await self.ctl.history(meta)).current.segments)
        hot: list[SegmentRecord] = []
        cold: set[int] = set()
        for s in segments:
            if now - s.creation_time_ms < self.ctl.config.autoscale_cooldown_ms:
                continue
            rate = self.rate(config, qualified_segment_name(scope, stream, s.id))
            if rate > policy.target_rate:
                hot.append(s)
            elif rate < policy.target_rate * self.ctl.config.autoscale_cold_fraction:
                cold.add(s.id)
        marks = {int(k.split("/", 1)[1]) for k, _ in await self.ctl.md.entries(meta.table, "cold/")}
        live = {s.id for s in segments}
        if cold - marks:
            await meta.put({seg_key("cold", c): now for c in sorted(cold - marks)})
        await self.ctl.md.remove(meta.table, [seg_key("cold", m) for m in sorted(marks - cold)])
        marks = cold & live
        if hot and policy.scale_factor >= 2:
            ranges: list[KeyRange] = []
            sealed: list[int] = []
            for s in hot:
                parts = split(s.key_start, s.key_end, policy.scale_factor)
                if len(parts) >= 2:
                    sealed.append(s.id)
                    ranges += parts
            if sealed:
                log.info("auto-scaling %s/%s: splitting hot segments %s", scope, stream, sealed)
                await self.ctl.scale(scope, stream, sealed, ranges)
                return
        pairs = []
        count = len(segments)
        i = 0
        while i + 1 < len(segments) and count > policy.min_segments:
            a, b = segments[i], segments[i + 1]
            if a.id in marks and b.id in marks and a.key_end == b.key_start:
                pairs.append((a, b))
                count -= 1
                i += 2
            else:
                i += 1
        if pairs:
            log.info(
                "auto-scaling %s/%s: merging cold neighbours %s",
                scope,
                stream,
                [(a.id, b.id) for a, b in pairs],
            )
            await self.ctl.scale(
                scope,
                stream,
                [x.id for pair in pairs for x in pair],
                [KeyRange(a.key_start, b.key_end) for a, b in pairs],
            )
