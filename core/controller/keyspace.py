"""Key-space arithmetic on ``[0, 1)``.

Key-range bounds are floats chosen by callers. They are compared exactly, never with a
tolerance: two neighbouring ranges share a bound only if the two floats are equal, and a
set of ranges covers an interval only if, sorted by start, each range's end equals the
next range's start and the ends equal the interval's bounds. New bounds the controller
computes itself (equal splits) are strictly increasing floats whose outer bounds are the
interval's own bounds, so they pass the same checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tidegate.core.controller.api import InvalidArgumentError, KeyRange

Interval = tuple[float, float]


def check_range(r: KeyRange) -> None:
    if not (isinstance(r.start, int | float) and isinstance(r.end, int | float)):
        raise InvalidArgumentError(f"key range bounds must be numbers: {r!r}")
    if not (math.isfinite(r.start) and math.isfinite(r.end)):
        raise InvalidArgumentError(f"key range bounds must be finite: {r!r}")
    if not 0.0 <= r.start < r.end <= 1.0:
        raise InvalidArgumentError(f"key range [{r.start!r}, {r.end!r}) is empty or outside [0, 1)")


def merged(ranges: Iterable[Interval]) -> list[Interval]:
    """Sorted union of ranges, joining neighbours that share a bound exactly. Raises
    ``InvalidArgumentError`` if two ranges overlap."""
    out: list[Interval] = []
    for start, end in sorted(ranges):
        if out and start < out[-1][1]:
            raise InvalidArgumentError(
                f"key ranges overlap: [{out[-1][0]!r}, {out[-1][1]!r}) and [{start!r}, {end!r})"
            )
        if out and start == out[-1][1]:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def check_cover(ranges: Sequence[KeyRange], what: str = "key ranges") -> None:
    """Raise ``InvalidArgumentError`` unless ``ranges`` cover ``[0, 1)`` exactly and
    disjointly."""
    if not ranges:
        raise InvalidArgumentError(f"{what}: no key ranges")
    for r in ranges:
        check_range(r)
    union = merged((r.start, r.end) for r in ranges)
    if union != [(0.0, 1.0)]:
        raise InvalidArgumentError(f"{what} do not cover [0, 1) exactly: union is {union}")


def is_cover(ranges: Sequence[KeyRange]) -> bool:
    try:
        check_cover(ranges)
    except InvalidArgumentError:
        return False
    return True


def split(start: float, end: float, parts: int) -> list[KeyRange]:
    """``[start, end)`` in ``parts`` equal ranges (fewer if the floats between the bounds
    run out). The first starts at ``start`` and the last ends at ``end`` exactly."""
    bounds = [start]
    for i in range(1, parts):
        b = start + (end - start) * i / parts
        if bounds[-1] < b < end:
            bounds.append(b)
    bounds.append(end)
    return [KeyRange(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def equal_cover(parts: int) -> list[KeyRange]:
    return split(0.0, 1.0, parts)


def overlaps(a: Interval, b: Interval) -> bool:
    return a[0] < b[1] and b[0] < a[1]
