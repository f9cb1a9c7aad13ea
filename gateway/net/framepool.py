"""Receive buffers for large request frames, reused once nothing refers to them.

A produce request from librdkafka is about 1 MB (it caps requests at
``message.max.bytes``), and each needs a buffer of its own: the request's batches are
appended from it without a copy. Allocated fresh, such a buffer is a mapping of its
own (``malloc.mmap.threshold.bytes``, 256 KiB, sends every block that large to ``mmap``
so that freed cache blocks do not stay in the heap) and goes back with ``munmap``, so
every frame's pages were faulted in and zero-filled again, which under produce load
was a large share of the server's CPU (``bench/RESULTS.md``).

``FramePool.take`` hands out a writable view of exactly the size asked, over a buffer
of whole pages, or over a free one up to ``SLACK_GRANULES`` pages larger, so frames of
nearby sizes share buffers. A buffer goes back to the pool only once nothing else
refers to it. Every view of it (the request's records, the durable log's pending write,
a cache entry) holds a reference to it, so its reference count says exactly when that
is; until then its bytes are never touched.

- Each ``take`` checks up to ``CHECKS_PER_TAKE`` of the buffers it lent, oldest first
  (checking fewer left released frames unused), and all of them before it allocates
  (a check is far cheaper than a fresh buffer's page faults).
- A frame whose batches the cache keeps is held until the cache evicts them (about
  ``cache_bytes_max`` of later data), so up to ``tracked_max`` lent buffers are tracked
  (enough for a full cache of ~1 MB frames). Past that the oldest are no longer
  tracked (freed as usual once released).
- Free buffers are kept up to ``idle_bytes_max``; a buffer freed when that is full
  pushes out those free the longest. Keeping the first ones instead filled the space
  with odd sizes (the few smaller frames, one each) that no later frame fitted, so
  most frames were allocated afresh, page faults and all, on the event loop.
- New buffers are anonymous mappings populated in one call (``_fresh``), not
  ``bytearray``s zero-filled page fault by page fault.
- While the pool holds buffers, a sweep every ``SWEEP_INTERVAL_S`` checks all lent ones
  and, after an interval with no large frame, frees the idle ones, so what large frames
  needed is given back when they stop.
"""

from __future__ import annotations

import asyncio
import mmap
import sys
from collections import OrderedDict, deque

KiB = 1024
MiB = 1024 * KiB

#: Buffers are allocated in multiples of this (a page).
GRANULE = 4 * KiB
#: A frame may take a free buffer up to this many granules larger than it needs.
SLACK_GRANULES = 16
#: Lent buffers checked per ``take``: a released one waits at most
#: ``tracked_max / CHECKS_PER_TAKE`` takes.
CHECKS_PER_TAKE = 64
#: Seconds between sweeps while the pool holds buffers: every lent buffer is checked,
#: and free ones are dropped if no frame was taken since the previous sweep.
SWEEP_INTERVAL_S = 0.5
#: ``sys.getrefcount`` of a buffer only a local variable refers to: the variable and
#: the call's own argument.
_UNUSED = 2

#: A pooled buffer: an anonymous mapping, or a ``bytearray`` where mappings cannot be
#: populated at once.
Buffer = mmap.mmap | bytearray
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _fresh(capacity: int) -> Buffer:
    """A new buffer of ``capacity`` bytes (whole pages). An anonymous mapping made with
    ``MAP_POPULATE`` has its pages faulted in by one ``mmap`` call, already zero, where
    ``bytearray(capacity)`` got a mapping of its own too (above the malloc mmap
    threshold) and then took a page fault per page as it zero-filled them, which costs
    more CPU; while the cache fills, every large frame is a fresh buffer."""
    if not _POPULATE:
        return bytearray(capacity)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE
    return mmap.mmap(-1, capacity, flags=flags)


class FramePool:
    def __init__(
        self,
        *,
        buffer_bytes_max: int = 16 * MiB,
        idle_bytes_max: int = 16 * MiB,
        tracked_max: int = 512,
    ) -> None:
        self._buffer_bytes_max = buffer_bytes_max
        self._idle_bytes_max = idle_bytes_max
        self._tracked_max = tracked_max
        self._lent: deque[Buffer] = deque()
        # Free buffers by capacity, and all of them oldest first (keyed by ``id``).
        self._idle: dict[int, dict[int, Buffer]] = {}
        self._idle_order: OrderedDict[int, Buffer] = OrderedDict()
        self.idle_bytes = 0
        #: Buffers allocated and buffers reused, for tests and stats.
        self.allocated = 0
        self.reused = 0
        self._taken = False  # since the last sweep
        self._sweep: asyncio.TimerHandle | None = None

    def take(self, size: int) -> memoryview:
        """A writable view of ``size`` bytes. Its contents are whatever the buffer held
        before: the caller fills it."""
        if size > self._buffer_bytes_max:
            return memoryview(bytearray(size))
        capacity = -(-size // GRANULE) * GRANULE
        self._reclaim()
        buf = self._free(capacity)
        if buf is None:
            # Checking every lent buffer costs far less than a new buffer's page faults.
            self._reclaim(len(self._lent))
            buf = self._free(capacity)
        if buf is None:
            buf = _fresh(capacity)
            self.allocated += 1
        else:
            self.reused += 1
        lent = self._lent
        lent.append(buf)
        if len(lent) > self._tracked_max:
            lent.popleft()  # long in use: freed as usual once released, never reused
        self._taken = True
        if self._sweep is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass  # no loop (a unit test): no sweeps
            else:
                self._sweep = loop.call_later(SWEEP_INTERVAL_S, self.sweep)
        return memoryview(buf)[:size]

    def _free(self, capacity: int) -> Buffer | None:
        """A free buffer of ``capacity`` bytes or a little more, the most recently freed."""
        idle = self._idle
        for fit in range(capacity, capacity + (SLACK_GRANULES + 1) * GRANULE, GRANULE):
            free = idle.get(fit)
            if free:
                key, buf = free.popitem()
                del self._idle_order[key]
                self.idle_bytes -= fit
                return buf
        return None

    def sweep(self) -> None:
        """Check every lent buffer; if no frame was taken since the last sweep, free the
        idle ones too. Without it, buffers released while no large frames arrive (the
        cache evicting them under a stream of small requests) stayed alive in the lent
        list, and RSS grew with the cache's new data."""
        self._sweep = None
        self._reclaim(len(self._lent))
        if not self._taken:
            self._idle.clear()
            self._idle_order.clear()
            self.idle_bytes = 0
        self._taken = False
        if self._lent or self._idle_order:
            self._sweep = asyncio.get_running_loop().call_later(SWEEP_INTERVAL_S, self.sweep)

    def _reclaim(self, checks: int = CHECKS_PER_TAKE) -> None:
        lent = self._lent
        for _ in range(min(len(lent), checks)):
            buf = lent.popleft()
            if sys.getrefcount(buf) > _UNUSED:
                lent.append(buf)  # still in use
                continue
            capacity = len(buf)
            if capacity > self._idle_bytes_max:
                continue
            order = self._idle_order
            while self.idle_bytes + capacity > self._idle_bytes_max:
                key, old = order.popitem(last=False)
                del self._idle[len(old)][key]
                self.idle_bytes -= len(old)
            self._idle.setdefault(capacity, {})[id(buf)] = buf
            order[id(buf)] = buf
            self.idle_bytes += capacity
