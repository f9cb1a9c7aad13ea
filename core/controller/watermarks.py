"""Watermarks from writer marks.

Writers report marks: a time and their position (segment id -> offset of the segments
they wrote to), stored as ``writer/<name>`` -> ``{"time", "position", "updated"}`` in the
stream's table. A writer's time never goes backwards and neither does its offset in any
segment (``ConflictError`` otherwise).

Every ``watermark_period_ms``, for each stream with marks from writers active within
``watermark_writer_timeout_ms``, the controller computes a watermark: the lowest and
highest of their times, and the upper bound of their positions (per segment the largest
offset; a segment dropped when a newer segment overlapping it was reported). It is
stored as ``watermark/<time>`` only if its lower time is above the previous watermark's,
so watermarks only move forward; at most ``watermarks_max`` are kept. Marks of writers
silent for longer than the timeout are removed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidegate.core.controller.api import ConflictError, InvalidArgumentError, StreamState, Watermark
from tidegate.core.controller.metadata import StreamMeta, time_key
from tidegate.core.controller.records import Json, cut_from_json, cut_to_json
from tidegate.core.controller.services import ControllerServices

log = logging.getLogger(__name__)


class Watermarks:
    def __init__(self, ctl: ControllerServices) -> None:
        self.ctl = ctl

    async def note_writer_mark(
        self, scope: str, stream: str, writer: str, time_ms: int, position: Mapping[int, int]
    ) -> None:
        if not isinstance(writer, str) or not 0 < len(writer) <= self.ctl.config.name_length_max:
            raise InvalidArgumentError(
                f"writer id {writer!r} is not 1..{self.ctl.config.name_length_max} characters"
            )
        if isinstance(time_ms, bool) or not isinstance(time_ms, int) or time_ms < 0:
            raise InvalidArgumentError(f"mark time {time_ms!r} is not an integer >= 0")
        meta = await self.ctl.stream_meta(scope, stream)
        h = await self.ctl.history(meta)
        for seg, offset in position.items():
            h.segment(seg)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise InvalidArgumentError(
                    f"offset {offset!r} of segment {seg} is not an integer >= 0"
                )
        key = f"writer/{writer}"
        prev = await meta.get(key)
        if prev is not None:
            if time_ms < prev.value["time"]:
                raise ConflictError(
                    f"writer {writer}: mark time {time_ms} is before {prev.value['time']}"
                )
            before = cut_from_json(prev.value["position"])
            for seg, offset in position.items():
                if offset < before.get(seg, 0):
                    raise ConflictError(f"writer {writer}: position in {seg} went back")
        value = {"time": time_ms, "position": cut_to_json(position), "updated": self.ctl.now_ms()}
        await meta.put({key: value}, {key: -1 if prev is None else prev.version})

    async def remove_writer(self, scope: str, stream: str, writer: str) -> None:
        meta = await self.ctl.stream_meta(scope, stream)
        await self.ctl.md.remove(meta.table, [f"writer/{writer}"])

    async def get(self, scope: str, stream: str, since_ms: int = -1) -> list[Watermark]:
        """Watermarks with lower time above ``since_ms``, oldest first."""
        meta = await self.ctl.stream_meta(scope, stream)
        out = []
        for _, v in await self.ctl.md.entries(meta.table, "watermark/"):
            if v.value["lower"] > since_ms:
                out.append(
                    Watermark(v.value["lower"], v.value["upper"], cut_from_json(v.value["cut"]))
                )
        return out

    async def run_once(self) -> None:
        for scope, stream in await self.ctl.streams_with_state():
            try:
                await self.compute(await self.ctl.stream_meta(scope, stream))
            except Exception:
                log.exception("watermark of %s/%s", scope, stream)

    async def compute(self, meta: StreamMeta) -> Watermark | None:
        state, _ = await meta.state()
        if state not in (StreamState.ACTIVE, StreamState.SEALED):
            return None
        now = self.ctl.now_ms()
        timeout = self.ctl.config.watermark_writer_timeout_ms
        marks: list[tuple[str, Json]] = []
        idle: list[tuple[str, Json]] = []
        for key, v in await self.ctl.md.entries(meta.table, "writer/"):
            (marks if now - v.value["updated"] <= timeout else idle).append((key, v.value))
        # a writer silent for the timeout is forgotten (it no longer holds watermarks back)
        await self.ctl.md.remove(meta.table, [k for k, _ in idle])
        if not marks:
            return None
        h = await self.ctl.history(meta)
        upper: dict[int, int] = {}
        for _, m in marks:
            for seg, offset in cut_from_json(m["position"]).items():
                upper[seg] = max(offset, upper.get(seg, 0))
        segs = [h.segment(s) for s in upper]
        for s in segs:
            if any(
                o.epoch > s.epoch and o.key_start < s.key_end and s.key_start < o.key_end
                for o in segs
            ):
                upper.pop(s.id, None)
        times = [m["time"] for _, m in marks]
        wm = Watermark(min(times), max(times), upper)
        entries = await self.ctl.md.entries(meta.table, "watermark/")
        if entries and wm.lower_time_ms <= entries[-1][1].value["lower"]:
            return None
        await meta.put(
            {
                time_key("watermark", now): {
                    "lower": wm.lower_time_ms,
                    "upper": wm.upper_time_ms,
                    "cut": cut_to_json(upper),
                }
            }
        )
        excess = len(entries) + 1 - self.ctl.config.watermarks_max
        if excess > 0:
            await self.ctl.md.remove(meta.table, [k for k, _ in entries[:excess]])
        return wm
