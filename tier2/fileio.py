"""Positional vectored writes, shared by Tier-1 log files and Tier-2 chunk files."""

from __future__ import annotations

import os

from tier2.api import split_views

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
