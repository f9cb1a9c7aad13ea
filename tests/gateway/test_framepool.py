"""``gateway.net.framepool.FramePool``: a buffer is reused only once nothing refers to it
(any view of it, however derived, keeps it out of reuse), and what it keeps is bounded."""

from __future__ import annotations

import ctypes
import gc
import mmap

from tidegate.gateway.net.framepool import GRANULE, FramePool, MiB


def test_a_released_buffer_is_reused_for_a_frame_of_a_nearby_size() -> None:
    pool = FramePool()
    first = pool.take(1_000_000)
    assert len(first) == 1_000_000 and not first.readonly
    first[:3] = b"abc"
    del first
    again = pool.take(1_000_000 - 5000)  # same granule
    assert (pool.allocated, pool.reused) == (1, 1)
    assert len(again) == 1_000_000 - 5000
    other = pool.take(3 * GRANULE + 1)  # another size class: a new buffer
    assert (pool.allocated, pool.reused) == (2, 1)
    assert len(other) == 3 * GRANULE + 1


def test_new_buffers_are_populated_mappings_and_start_zeroed() -> None:
    """A new buffer is an anonymous mapping whose pages one ``mmap`` call faulted in
    (``MAP_POPULATE``), not a ``bytearray`` zero-filled a page fault at a time; all of
    its pages are resident, and zero, before anything is received into it."""
    pool = FramePool()
    frame = pool.take(1_000_000)
    assert isinstance(frame.obj, mmap.mmap)
    assert _resident_bytes(frame) >= 1_000_000  # before anything touched it
    assert bytes(frame) == bytes(1_000_000)


def _resident_bytes(view: memoryview) -> int:
    """The resident bytes (``Rss``) of the mapping holding ``view``, from smaps."""
    address = ctypes.addressof(ctypes.c_char.from_buffer(view))
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            first = line.split(" ", 1)[0]
            if "-" in first and not first.endswith(":"):
                low, high = (int(x, 16) for x in first.split("-"))
                inside = low <= address < high
            elif inside and line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("mapping not found in smaps")


def test_any_view_of_a_buffer_keeps_it_from_reuse() -> None:
    pool = FramePool()
    frame = pool.take(200_000)
    frame[:] = b"x" * 200_000
    kept = [frame[10:20].toreadonly(), memoryview(frame)[5:6]]
    del frame
    for _ in range(20):  # every take checks the buffers still lent out
        fresh = pool.take(200_000)
        fresh[:] = b"y" * 200_000
        del fresh
    assert bytes(kept[0]) == b"x" * 10 and bytes(kept[1]) == b"x"
    assert pool.allocated == 2  # the kept one, and one reused 19 times
    kept.clear()
    gc.collect()
    pool.take(200_000)
    pool.take(200_000)
    assert pool.allocated == 2


def test_frames_over_the_buffer_bound_are_not_pooled() -> None:
    pool = FramePool(buffer_bytes_max=1 << 20)
    big = pool.take((1 << 20) + 1)
    assert len(big) == (1 << 20) + 1
    del big
    pool.take((1 << 20) + 1)
    assert (pool.allocated, pool.reused) == (0, 0)


def test_idle_buffers_are_bounded() -> None:
    pool = FramePool(idle_bytes_max=2 * GRANULE)
    held = [pool.take(GRANULE) for _ in range(5)]
    held.clear()
    for _ in range(5):
        pool._reclaim()
    assert pool.idle_bytes == 2 * GRANULE


def test_a_freed_buffer_pushes_out_those_free_the_longest() -> None:
    """Odd sizes freed once do not keep the common size out: with the space full of
    them, freed buffers of the common size still find room and are reused."""
    common = 40 * GRANULE
    pool = FramePool(idle_bytes_max=2 * common)
    odd = [pool.take(n * GRANULE) for n in (21, 23, 25)]
    odd.clear()
    pool._reclaim()
    assert pool.idle_bytes == 69 * GRANULE
    frames = [pool.take(common) for _ in range(2)]  # no free buffer fits them
    assert pool.allocated == 5
    frames.clear()
    pool._reclaim()
    assert pool.idle_bytes == 2 * common
    again = [pool.take(common) for _ in range(2)]
    assert (pool.allocated, pool.reused) == (5, 2)
    assert len(again[0]) == common


def test_the_oldest_lent_buffers_stop_being_tracked() -> None:
    pool = FramePool(tracked_max=3)
    held = [pool.take(GRANULE) for _ in range(5)]
    assert len(pool._lent) == 3
    held.clear()
    pool.take(GRANULE)
    assert pool.reused == 1


async def test_sweeps_free_what_was_released_while_no_frames_arrive() -> None:
    pool = FramePool(tracked_max=8)
    held = [pool.take(GRANULE) for _ in range(3)]
    assert pool._sweep is not None
    held.clear()  # released while no take follows
    pool.sweep()  # a take happened since the last sweep: kept for reuse
    assert len(pool._lent) == 0 and pool.idle_bytes == 3 * GRANULE
    pool.sweep()  # nothing taken since: freed, and no further sweep
    assert pool.idle_bytes == 0 and pool._sweep is None


def test_frames_still_arriving_are_pooled_only_within_the_bound() -> None:
    pool = FramePool(arriving_bytes_max=3 * MiB)
    views = [pool.receive(MiB) for _ in range(4)]
    assert [charged for _, charged in views] == [MiB, MiB, MiB, 0]
    assert pool.arriving_bytes == 3 * MiB
    assert pool.allocated == 3  # the fourth is a lazy mapping, outside the pool
    big, charged = pool.receive(64 * MiB)  # larger than any pooled buffer
    assert charged == 0 and len(big) == 64 * MiB
    for _, charged in views:
        pool.arrived(charged)
    assert pool.arriving_bytes == 0
