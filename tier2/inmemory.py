"""An in-memory Tier-2 ``Storage``: the reference model of ``tier2.api``.

Nothing survives the process. Unit tests of upper layers run on it, and the contract
suite runs against it and the filesystem store alike. One lock guards everything: the
contract asks for thread safety per segment, and a global lock is the simplest way to
give it here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tidegate.tier2.api import (
    BadOffsetError,
    SegmentExistsError,
    SegmentInfo,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
    WriteData,
    check_read_range,
)
from tidegate.tier2.fileio import as_views


@dataclass
class _Segment:
    # ``data[0]`` is the byte at offset ``start_offset``; bytes below it are gone.
    data: bytearray = field(default_factory=bytearray)
    start_offset: int = 0
    sealed: bool = False

    @property
    def length(self) -> int:
        return self.start_offset + len(self.data)


class InMemoryStorage:
    def __init__(self) -> None:
        self._segments: dict[str, _Segment] = {}
        self._lock = threading.Lock()

    def _get(self, name: str) -> _Segment:
        seg = self._segments.get(name)
        if seg is None:
            raise SegmentNotFoundError(name)
        return seg

    @staticmethod
    def _info(name: str, seg: _Segment) -> SegmentInfo:
        return SegmentInfo(name, seg.length, seg.start_offset, seg.sealed)

    def create(self, name: str) -> SegmentInfo:
        with self._lock:
            if name in self._segments:
                raise SegmentExistsError(name)
            seg = self._segments[name] = _Segment()
            return self._info(name, seg)

    def exists(self, name: str) -> bool:
        with self._lock:
            return name in self._segments

    def get_info(self, name: str) -> SegmentInfo:
        with self._lock:
            return self._info(name, self._get(name))

    def write(self, name: str, offset: int, data: WriteData, *, durable: bool = True) -> None:
        with self._lock:
            seg = self._get(name)
            if seg.sealed:
                raise SegmentSealedError(name)
            if offset != seg.length:
                raise BadOffsetError(name, f"write at {offset}, length is {seg.length}")
            for view in as_views(data):
                seg.data += view

    def read(self, name: str, offset: int, length: int, read_ahead_max: int | None = None) -> bytes:
        with self._lock:
            seg = self._get(name)
            check_read_range(name, offset, length, seg.start_offset, seg.length)
            pos = offset - seg.start_offset
            return bytes(seg.data[pos : pos + length])

    def seal(self, name: str) -> None:
        with self._lock:
            self._get(name).sealed = True

    def concat(self, target: str, target_offset: int, source: str) -> None:
        with self._lock:
            tgt = self._get(target)
            src = self._get(source)
            if target == source:
                raise BadOffsetError(target, "cannot concat a segment into itself")
            if tgt.sealed:
                raise SegmentSealedError(target)
            if not src.sealed:
                raise SegmentNotSealedError(source)
            if src.start_offset != 0:
                raise BadOffsetError(source, "cannot concat a truncated source")
            if target_offset != tgt.length:
                raise BadOffsetError(target, f"concat at {target_offset}, length is {tgt.length}")
            tgt.data += src.data
            del self._segments[source]

    def truncate(self, name: str, offset: int) -> None:
        with self._lock:
            seg = self._get(name)
            if offset > seg.length:
                raise BadOffsetError(name, f"truncate at {offset}, length is {seg.length}")
            if offset <= seg.start_offset:
                return
            del seg.data[: offset - seg.start_offset]
            seg.start_offset = offset

    def delete(self, name: str) -> None:
        with self._lock:
            if self._segments.pop(name, None) is None:
                raise SegmentNotFoundError(name)

    def list_segments(self) -> Iterator[str]:
        with self._lock:
            names = sorted(self._segments)
        return iter(names)

    def forget_cached(self, belongs: Callable[[str], bool]) -> None:
        pass  # nothing cached: the segments are this object
