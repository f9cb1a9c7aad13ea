"""Retention: periodic StreamCuts and truncation by time or size.

Each round, for every active stream with a retention policy: the tail StreamCut is
recorded in the retention set (``retention/<time>`` with the bytes from the stream's
very beginning to the cut), then

* time policy (``value`` ms): the newest recorded cut taken at least ``value`` ms ago;
* size policy (``value`` bytes): the newest recorded cut that leaves at least ``value``
  bytes after it, taken only once the stream holds more than ``value`` bytes;

is the truncation point, if it lies after the current one. A time policy with a size
bound (``bytes_max``, Kafka's ``retention.ms`` with ``retention.bytes``) takes the newest
cut either rule allows. When reader groups have
subscribed to the stream (consumption-based retention), the point is further held back
to the newest recorded cut that no subscriber has yet to read past. Cuts at or before
the truncation point leave the set; the set keeps at most ``retention_set_max`` cuts, thinned evenly over time (the oldest
stays).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from tidegate.core.controller.api import (
    ConflictError,
    RetentionType,
    StreamCut,
    StreamNotFoundError,
    StreamState,
)
from tidegate.core.controller.history import History, head_cut
from tidegate.core.controller.metadata import StreamMeta, time_key
from tidegate.core.controller.records import RetentionCut, cut_from_json
from tidegate.core.controller.services import ControllerServices

log = logging.getLogger(__name__)


class RetentionHost(ControllerServices, Protocol):
    """What retention uses besides the controller's services: the stream's tail and the
    truncate workflow."""

    async def get_tail_cut(self, scope: str, stream: str) -> dict[int, int]:
        """The current epoch's segments at their present lengths."""

    async def truncate(
        self, scope: str, stream: str, cut: StreamCut, *, reason: str = "request"
    ) -> None:
        """Truncate the stream at ``cut``; ``reason`` labels it in the controller's counts."""


class RetentionManager:
    def __init__(self, ctl: RetentionHost) -> None:
        self.ctl = ctl

    async def run_once(self) -> None:
        for scope, stream in await self.ctl.streams_with_state():
            try:
                await self.check(scope, stream)
            except ConflictError:
                pass  # another workflow holds the stream; next round
            except StreamNotFoundError:
                pass  # deleted since it was listed
            except Exception:
                log.exception("retention of %s/%s", scope, stream)

    async def retention_set(self, meta: StreamMeta) -> list[tuple[str, RetentionCut]]:
        out, steps = [], _Steps()
        for k, v in await self.ctl.md.entries(meta.table, "retention/"):
            out.append((k, RetentionCut.from_json(v.value)))
            await steps.done(len(out[-1][1].cut))
        return out

    async def record_cut(self, meta: StreamMeta, h: History) -> RetentionCut:
        tail = await self.ctl.get_tail_cut(meta.scope, meta.stream)
        sizes = await meta.sealed()
        now = self.ctl.now_ms()
        rc = RetentionCut(now, tail, h.bytes_before(tail, lambda s: sizes[s].size))
        await _Steps().done(len(tail))  # the sum over every segment and the encoding apart
        await meta.put({time_key("retention", now): rc.to_json()})
        return rc

    async def check(self, scope: str, stream: str) -> None:
        meta = await self.ctl.stream_meta(scope, stream)
        policy = (await meta.config()).retention
        state, _ = await meta.state()
        if policy is None or state != StreamState.ACTIVE:
            return
        h = await self.ctl.history(meta)
        latest = await self.record_cut(meta, h)
        cuts = await self.retention_set(meta)
        now = self.ctl.now_ms()
        if policy.type == RetentionType.TIME:
            size_max = policy.bytes_max
            eligible = [
                c for _, c in cuts
                if c.time_ms <= now - policy.value
                or (size_max is not None and latest.recording_size - c.recording_size >= size_max)
            ]
        else:
            eligible = [
                c for _, c in cuts if latest.recording_size - c.recording_size >= policy.value
            ]
        subscribers = [
            cut_from_json(v.value["cut"])
            for _, v in await self.ctl.md.entries(meta.table, "subscriber/")
        ]
        steps = _Steps()
        if subscribers:
            allowed = []
            for c in eligible:
                if all(h.cut_ge(s, c.cut) for s in subscribers):
                    allowed.append(c)
                await steps.done(len(c.cut) * len(subscribers))
            eligible = allowed
        trunc = await meta.truncation()
        head = head_cut(h, trunc.cut if trunc else None)
        if eligible:
            target = eligible[-1]
            if target.cut != head and h.cut_ge(target.cut, head):
                log.info("retention: truncating %s at %s", meta.name, dict(target.cut))
                await self.ctl.truncate(scope, stream, target.cut, reason="retention")
                head = dict(target.cut)
        stale = []
        for k, c in cuts:
            if h.cut_ge(head, c.cut):
                stale.append(k)
            await steps.done(len(c.cut))
        gone = set(stale)
        keep = [(k, c.time_ms) for k, c in cuts if k not in gone]
        stale += thin(keep, self.ctl.config.retention_set_max)
        await self.ctl.md.remove(meta.table, stale)


#: Segments of cut arithmetic (or of decoding a cut) one event-loop step takes: a stream
#: of thousands of segments has cuts as large, and the retention set holds hundreds.
CUT_SEGMENTS_PER_STEP = 1024


class _Steps:
    """Counts the segments handled since the loop last ran other work."""

    def __init__(self) -> None:
        self.segments = 0

    async def done(self, segments: int) -> None:
        self.segments += segments
        if self.segments >= CUT_SEGMENTS_PER_STEP:
            self.segments = 0
            await asyncio.sleep(0)


def thin(cuts: list[tuple[str, int]], count_max: int) -> list[str]:
    """Keys to drop so that at most ``count_max`` of ``cuts`` (key, time, oldest first)
    remain: always interior ones, each time the one whose neighbours are closest in time.
    The oldest cut stays, so a bounded set still spans the whole history and a time
    policy longer than ``count_max`` periods still finds a cut old enough."""
    keys = [k for k, _ in cuts]
    times = [t for _, t in cuts]
    dropped: list[str] = []
    while len(keys) > max(count_max, 2):
        i = min(range(1, len(keys) - 1), key=lambda j: times[j + 1] - times[j - 1])
        dropped.append(keys.pop(i))
        times.pop(i)
    return dropped
