"""Buffer lists and positional vectored writes, shared by Tier-1 log files and Tier-2
chunk files."""

from __future__ import annotations

import os

from tidegate.tier2.api import WriteData


def as_views(data: WriteData) -> list[memoryview]:
    """``data`` as a list of non-empty byte views (no copy)."""
    if isinstance(data, bytes | bytearray | memoryview):
        data = (data,)
    views = []
    for buf in data:
        v = memoryview(buf)
        if v.format != "B" or v.ndim != 1:
            v = v.cast("B")
        if v.nbytes:
            views.append(v)
    return views


def split_views(views: list[memoryview], n: int) -> tuple[list[memoryview], list[memoryview]]:
    """The first ``n`` bytes of ``views`` and the rest, as views (no copy)."""
    head: list[memoryview] = []
    for i, v in enumerate(views):
        if n <= 0:
            return head, views[i:]
        if v.nbytes <= n:
            head.append(v)
            n -= v.nbytes
        else:
            head.append(v[:n])
            return head, [v[n:], *views[i + 1 :]]
    return head, []


_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def pwritev_all(fd: int, views: list[memoryview], offset: int) -> int:
    """Write all of ``views`` back to back at ``offset`` with ``pwritev`` (``IOV_MAX``
    buffers at a time, short writes continued); the bytes written."""
    total = 0
    while views:
        group, views = views[:_IOV_MAX], views[_IOV_MAX:]
        want = sum(v.nbytes for v in group)
        while want:
            n = os.pwritev(fd, group, offset)
            offset += n
            total += n
            want -= n
            if want:
                _, group = split_views(group, n)
    return total
