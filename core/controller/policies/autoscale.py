"""Auto-scaling from traffic.

For each active stream with a rate policy, each current segment older than
``autoscale_cooldown_ms`` is compared with the policy's ``target_rate`` (KB/s or
events/s):

* above the target it is hot, and every hot segment is split at once (one scale for all
  of them);
* below ``target_rate * autoscale_cold_fraction`` it is cold and marked so in the
  stream's metadata (``cold/<id>``); a mark is cleared when the segment is no longer
  cold;
* neighbouring cold segments are merged pair by pair (``scaleplan.plan_merges``: the
  smallest pairs first, so segments stay balanced) as long as the stream keeps
  ``min_segments`` and the merged rate stays at most halfway between the cold bound and
  the target, so a merge is not followed by a split of the same traffic.

A split takes precedence over merges in the same round. A scale that loses a race with
another workflow is simply retried next round. Each scale is logged with its reason.

Where the rates come from:

* a ``key_traffic`` source (``RoutingKeyTraffic``: the Kafka gateway's per-partition
  rates, each over a long and a short window) gives a segment's rate as the sum over
  the routing keys it holds. A segment is hot only if both windows are above the target
  and cold only if both are below the cold bound, so a rate falling fast (the long
  window still high, the short one low) splits nothing. A hot segment is cut between
  its keys where the traffic divides (``scaleplan.split_by_rate``); a segment holding a
  single key is never split, since one routing key never spans segments. A stream the
  source answers with no keys (not known yet) is left alone.
* otherwise the segment store's smoothed traffic of each segment; with a ``key_points``
  source a hot segment is cut between its keys into groups of about equally many keys,
  without one into ``scale_factor`` equal ranges.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    KeyRange,
    KeyTraffic,
    RoutingKeyTraffic,
    ScalingPolicy,
    ScalingType,
    SegmentRecord,
    StreamConfig,
    StreamState,
    qualified_segment_name,
)
from tidegate.core.controller.keyspace import split
from tidegate.core.controller.metadata import StreamMeta, seg_key
from tidegate.core.controller.policies.scaleplan import (
    KeyRate,
    MergeCandidate,
    keys_inside,
    plan_merges,
    split_between_keys,
    split_by_rate,
)
from tidegate.core.controller.services import ControllerServices
from tidegate.core.segmentstore.api import SegmentTraffic

__all__ = [
    "AutoScaler", "KeyPoints", "KeyTraffic", "RoutingKeyTraffic", "ScalingHost",
    "split_between_keys",
]

log = logging.getLogger(__name__)


#: (scope, stream) -> the routing keys the stream is known to use, or None if unknown.
KeyPoints = Callable[[str, str], Sequence[float] | None]


class ScalingHost(ControllerServices, Protocol):
    """What the auto-scaler uses besides the controller's services: the scale workflow."""

    async def scale(
        self,
        scope: str,
        stream: str,
        sealed_segments: Sequence[int],
        new_ranges: Sequence[KeyRange],
        *,
        kind: str = "manual",
    ) -> EpochRecord:
        """Seal ``sealed_segments`` and create segments over ``new_ranges``; ``kind``
        (``split``, ``merge``) labels the scale in the controller's counts."""


@dataclass(frozen=True, slots=True)
class _Rated:
    segment: SegmentRecord
    rate: float
    recent: float
    hot: bool
    cold: bool
    #: The routing keys it holds, if known.
    keys: list[float] | None
    #: Those keys with their rates, if known (from a ``key_traffic`` source).
    key_rates: list[KeyRate] | None = None


class AutoScaler:
    def __init__(
        self,
        ctl: ScalingHost,
        traffic: Callable[[str], SegmentTraffic],
        key_points: KeyPoints | None = None,
        key_traffic: RoutingKeyTraffic | None = None,
    ) -> None:
        self.ctl = ctl
        self.traffic = traffic
        self.key_points = key_points
        self.key_traffic = key_traffic

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

    def _rate_segments(
        self, scope: str, stream: str, config: StreamConfig, segments: Sequence[SegmentRecord]
    ) -> list[_Rated] | None:
        """Each segment with its rate and whether it is hot or cold; None to leave the
        stream alone this round."""
        policy = config.scaling
        cold_rate = policy.target_rate * self.ctl.config.autoscale_cold_fraction
        by_key = self.key_traffic.key_traffic(scope, stream) if self.key_traffic else None
        if by_key is not None and not by_key:
            return None
        kbytes = policy.type == ScalingType.BY_RATE_IN_KBYTES_PER_SEC
        out: list[_Rated] = []
        if by_key is not None:
            ordered = sorted(by_key, key=lambda k: k.key)
            at = [k.key for k in ordered]
            for s in segments:
                inside = ordered[bisect_left(at, s.key_start) : bisect_left(at, s.key_end)]
                if kbytes:
                    rates = [(k.bytes_per_second / 1024, k.recent_bytes_per_second / 1024)
                             for k in inside]
                else:
                    rates = [(k.events_per_second, k.recent_events_per_second) for k in inside]
                long = sum(r for r, _ in rates)
                short = sum(r for _, r in rates)
                hot = min(long, short) > policy.target_rate
                cold = max(long, short) < cold_rate
                key_rates = [KeyRate(k.key, r) for k, (r, _) in zip(inside, rates, strict=True)]
                out.append(
                    _Rated(s, long, short, hot, cold, [k.key for k in inside], key_rates)
                )
            return out
        points = self.key_points(scope, stream) if self.key_points else None
        for s in segments:
            rate = self.rate(config, qualified_segment_name(scope, stream, s.id))
            keys = None if points is None else keys_inside(s.key_start, s.key_end, points)
            out.append(
                _Rated(s, rate, rate, rate > policy.target_rate, rate < cold_rate, keys)
            )
        return out

    @staticmethod
    def _split(policy: ScalingPolicy, r: _Rated) -> list[KeyRange]:
        s = r.segment
        if r.key_rates is not None:
            return split_by_rate(s.key_start, s.key_end, r.key_rates, policy.scale_factor)
        if r.keys is None:
            return split(s.key_start, s.key_end, policy.scale_factor)
        return split_between_keys(s.key_start, s.key_end, r.keys, policy.scale_factor)

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
        rated = self._rate_segments(scope, stream, config, segments)
        if rated is None:
            return
        settled = [
            r for r in rated if now - r.segment.creation_time_ms >= self.ctl.config.autoscale_cooldown_ms
        ]
        cold = {r.segment.id for r in settled if r.cold}
        marks = {int(k.split("/", 1)[1]) for k, _ in await self.ctl.md.entries(meta.table, "cold/")}
        if cold - marks:
            await meta.put({seg_key("cold", c): now for c in sorted(cold - marks)})
        await self.ctl.md.remove(meta.table, [seg_key("cold", m) for m in sorted(marks - cold)])
        hot = [r for r in settled if r.hot]
        if hot and policy.scale_factor >= 2:
            ranges: list[KeyRange] = []
            sealed: list[int] = []
            reasons: list[str] = []
            for r in hot:
                parts = self._split(policy, r)
                if len(parts) >= 2:
                    sealed.append(r.segment.id)
                    ranges += parts
                    reasons.append(f"{r.segment.id} at {r.rate:.1f}")
            if sealed:
                log.info(
                    "auto-scaling %s/%s: splitting hot segments (rate > target %d %s): %s "
                    "into %s",
                    scope, stream, policy.target_rate, _unit(policy), ", ".join(reasons),
                    [(x.start, x.end) for x in ranges],
                )
                await self.ctl.scale(scope, stream, sealed, ranges, kind="split")
                return
        candidates = [
            MergeCandidate(
                r.segment.id, r.segment.key_start, r.segment.key_end,
                float(len(r.keys)) if r.keys is not None else r.segment.key_end - r.segment.key_start,
                r.rate, r.recent, r.segment.id in cold,
            )
            for r in rated
        ]
        fraction = self.ctl.config.autoscale_cold_fraction
        pairs = plan_merges(
            candidates, policy.min_segments, policy.target_rate * (1 + fraction) / 2
        )
        if pairs:
            log.info(
                "auto-scaling %s/%s: merging cold neighbours (rate < %.1f %s): %s",
                scope, stream, policy.target_rate * fraction, _unit(policy),
                ", ".join(f"{a.id}+{b.id} at {a.rate:.1f}+{b.rate:.1f}" for a, b in pairs),
            )
            await self.ctl.scale(
                scope,
                stream,
                [x.id for pair in pairs for x in pair],
                [KeyRange(a.key_start, b.key_end) for a, b in pairs],
                kind="merge",
            )


def _unit(policy: ScalingPolicy) -> str:
    return "KB/s" if policy.type == ScalingType.BY_RATE_IN_KBYTES_PER_SEC else "events/s"
