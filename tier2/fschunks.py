"""Chunk-file I/O of ``FileSystemStorage``: create, append (synced or not), sync, cut back,
read.

A chunk file ``<start>.chunk`` holds segment bytes ``[start, start + size)``. These
functions never fill a gap with zeros: an append checks the file still has the size the
caller last saw, and a read that finds fewer bytes than expected raises
``DataMissingError``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import Any

from tidegate.tier2.api import DataMissingError, StorageError
from tidegate.tier2.fileio import pwritev_all
from tidegate.tier2.fsmeta import chunk_file_name, fsync_dir, parse_chunk_file_name


def create_empty_chunk(d: Path, start: int) -> None:
    """Create ``<start>.chunk`` empty and durably (file and directory fsynced)."""
    path = d / chunk_file_name(start)
    path.unlink(missing_ok=True)  # an unlisted leftover, possibly a hard link: never reuse
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(d)


def append_to_chunk(
    name: str,
    d: Path,
    start: int,
    size: int,
    piece: list[memoryview],
    *,
    sync: bool = True,
    drop_pages: bool = False,
    drop_from: int | None = None,
) -> int:
    """Append the buffers of ``piece`` (back to back) to the chunk, which must hold
    ``size`` bytes, and ``fdatasync`` (unless not ``sync``); the chunk's new size.

    With ``sync`` and ``drop_pages``, the pages from ``drop_from`` (default ``size``) to
    the end then leave the page cache (all but a partial last page). Without ``sync``
    the kernel is told to start writing the new pages back now (``POSIX_FADV_DONTNEED``
    on dirty pages starts their write-back and drops none of them), so a later sync
    finds them written instead of flushing them all at once."""
    path = d / chunk_file_name(start)
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        raise DataMissingError(name, f"chunk {start} is missing") from None
    except OSError as e:
        raise StorageError(name, f"cannot open chunk {start}: {e}") from e
    try:
        actual = os.fstat(fd).st_size
        if actual != size:
            raise DataMissingError(name, f"chunk {start} has {actual} bytes, expected {size}")
        pos = size + pwritev_all(fd, piece, size)
        if sync:
            os.fdatasync(fd)
            if drop_pages:
                first = size if drop_from is None else drop_from
                os.posix_fadvise(fd, first, pos - first, os.POSIX_FADV_DONTNEED)
        else:
            os.posix_fadvise(fd, size, pos - size, os.POSIX_FADV_DONTNEED)
    except OSError as e:
        raise StorageError(name, f"write to chunk {start} failed: {e}") from e
    finally:
        os.close(fd)
    return pos


def sync_chunk(name: str, d: Path, start: int, *, drop_from: int | None = None) -> None:
    """``fdatasync`` the chunk; with ``drop_from``, its pages from there on then leave
    the page cache."""
    try:
        fd = os.open(d / chunk_file_name(start), os.O_WRONLY)
    except FileNotFoundError:
        raise DataMissingError(name, f"chunk {start} is missing") from None
    except OSError as e:
        raise StorageError(name, f"cannot open chunk {start}: {e}") from e
    try:
        os.fdatasync(fd)
        if drop_from is not None:
            os.posix_fadvise(fd, drop_from, 0, os.POSIX_FADV_DONTNEED)
    except OSError as e:
        raise StorageError(name, f"sync of chunk {start} failed: {e}") from e
    finally:
        os.close(fd)


def cut_back_chunk(d: Path, start: int, size: int) -> None:
    """Shorten the chunk to ``size`` bytes if it is longer (never extend it), durably."""
    fd = os.open(d / chunk_file_name(start), os.O_WRONLY)
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
            os.fdatasync(fd)
    finally:
        os.close(fd)


def remove_unlisted_chunks(d: Path, listed: list[int], below: int | None) -> None:
    """Unlink chunk files of ``d`` not in ``listed`` (only those starting below ``below``)."""
    keep = set(listed)
    for entry in os.listdir(d):
        start = parse_chunk_file_name(entry)
        if start is None or start in keep or (below is not None and start >= below):
            continue
        os.unlink(d / entry)


def read_chunk(
    name: str, d: str | Path, start: int, pos: int, n: int, *, read_ahead: int = 0
) -> bytes:
    """Exactly ``n`` bytes from position ``pos`` of the chunk, or ``DataMissingError``.
    With ``read_ahead`` the kernel is asked to start reading that many bytes after them,
    and no more: its own read-ahead is off for the read (``POSIX_FADV_RANDOM``). It would
    otherwise see the cached pages before ``pos`` as a sequential reader's and read up to
    the device's ``read_ahead_kb`` past the caller's limit, into data the segment
    store's cache already holds."""
    try:
        fd = os.open(os.path.join(d, chunk_file_name(start)), os.O_RDONLY)
    except FileNotFoundError:
        raise DataMissingError(name, f"chunk {start} is missing") from None
    except OSError as e:
        raise StorageError(name, f"cannot open chunk {start}: {e}") from e
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        data = os.pread(fd, n, pos)
        if len(data) < n:
            parts = [data]
            got = len(data)
            while got < n:
                more = os.pread(fd, n - got, pos + got)
                if not more:
                    raise DataMissingError(
                        name, f"chunk {start} ends at {pos + got}, expected {pos + n}"
                    )
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        if read_ahead:
            os.posix_fadvise(fd, pos + n, read_ahead, os.POSIX_FADV_WILLNEED)
        return data
    except OSError as e:
        raise StorageError(name, f"read of chunk {start} failed: {e}") from e
    finally:
        os.close(fd)


_FALLOC_FL_KEEP_SIZE = 1  # <linux/falloc.h>
_FALLOC_FL_PUNCH_HOLE = 2


def _load_fallocate() -> Any:
    name = ctypes.util.find_library("c")
    fn = getattr(ctypes.CDLL(name, use_errno=True), "fallocate", None) if name else None
    if fn is not None:
        fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        fn.restype = ctypes.c_int
    return fn


_fallocate = _load_fallocate()


def punch_below(d: Path, start: int, offset: int) -> int:
    """Free the disk blocks of chunk ``start`` that lie wholly below segment offset
    ``offset`` (a hole: the file keeps its size and offsets, the bytes read as zeros);
    the bytes freed, 0 where the platform or filesystem cannot punch holes. Truncation
    frees space this way inside the first kept chunk, not only whole chunks."""
    if _fallocate is None or offset <= start:
        return 0
    fd = os.open(d / chunk_file_name(start), os.O_WRONLY)
    try:
        block = max(os.fstat(fd).st_blksize, 1)
        length = (offset - start) // block * block
        if length <= 0 or _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, length):
            return 0
        return length
    finally:
        os.close(fd)
