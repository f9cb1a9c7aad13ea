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

With a ``key_points`` source (the routing keys a stream is known to use, e.g. the Kafka
gateway's partition points), a hot segment is split between its keys instead of into
equal ranges: into at most ``scale_factor`` groups of about equally many keys, each cut
halfway between neighbouring keys; a segment holding a single key is never split, since
one routing key never spans segments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    KeyRange,
    ScalingType,
    SegmentRecord,
    StreamConfig,
    StreamState,
    qualified_segment_name,
)
from tidegate.core.controller.keyspace import split
from tidegate.core.controller.metadata import StreamMeta, seg_key
from tidegate.core.controller.services import ControllerServices
from tidegate.core.segmentstore.api import SegmentTraffic

log = logging.getLogger(__name__)


#: (scope, stream) -> the routing keys the stream is known to use, or None if unknown.
KeyPoints = Callable[[str, str], Sequence[float] | None]


def split_between_keys(
    start: float, end: float, keys: Sequence[float], parts: int
) -> list[KeyRange]:
    """``[start, end)`` cut between its ``keys`` into at most ``parts`` ranges holding about
    equally many keys each; a single range when it holds fewer than two keys."""
    inside = sorted({k for k in keys if start <= k < end})
    n = min(parts, len(inside))
    if n < 2:
        return [KeyRange(start, end)]
    bounds = [start]
    for i in range(1, n):
        j = round(i * len(inside) / n)
        b = inside[j - 1] + (inside[j] - inside[j - 1]) / 2
        if bounds[-1] < b < end:
            bounds.append(b)
    bounds.append(end)
    return [KeyRange(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


class ScalingHost(ControllerServices, Protocol):
    """What the auto-scaler uses besides the controller's services: the scale workflow."""

    async def scale(
        self,
        scope: str,
        stream: str,
        sealed_segments: Sequence[int],
        new_ranges: Sequence[KeyRange],
    ) -> EpochRecord:
        """Seal ``sealed_segments`` and create segments over ``new_ranges``."""


class AutoScaler:
    def __init__(
        self,
        ctl: ScalingHost,
        traffic: Callable[[str], SegmentTraffic],
        key_points: KeyPoints | None = None,
    ) -> None:
        self.ctl = ctl
        self.traffic = traffic
        self.key_points = key_points

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
            keys = self.key_points(scope, stream) if self.key_points else None
            for s in hot:
                if keys is None:
                    parts = split(s.key_start, s.key_end, policy.scale_factor)
                else:
                    parts = split_between_keys(s.key_start, s.key_end, keys, policy.scale_factor)
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
