"""Tier-2 writes fenced by the container's epoch (cluster mode).

Tier-1 fences a stale container owner as the new owner opens the container's log (a
higher epoch), but Tier-2 is a plain shared filesystem: a paused owner that wakes after
another node took its container over could still write chunks and metadata there. As
Pravega's SLTS checks the container epoch on its metadata, each container here has a
fence file in Tier-2 holding the highest epoch that claimed it:

- ``claim(epoch)``: the new owner, once its Tier-1 log is open (its epoch known) and
  before its storage writer starts, writes its epoch under an exclusive ``flock``
  (a higher epoch already there: this owner is the stale one, ``StorageFencedError``).
- every Tier-2 mutation of the container (``FencedStorage``) holds a shared ``flock`` on
  the fence file while it reads the epoch there and runs; a higher epoch than its own
  raises ``StorageFencedError`` and nothing is written.

So a write either ran wholly before the claim (the new owner's recovery then sees it) or
sees the new epoch: the check and the write are one step against the claim. A paused
owner holding the shared lock delays the claim (the container's start is retried) but
never lets both write. ``flock`` spans processes on one machine and NFS (as fcntl locks).
"""

from __future__ import annotations

import fcntl
import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from tidegate.tier2.api import SegmentInfo, Storage, StorageError, StorageFencedError, WriteData

T = TypeVar("T")
_EPOCH = struct.Struct(">q")


class Tier2Fence:
    def __init__(self, path: Path, *, claim_timeout_s: float = 10.0) -> None:
        self.path = path
        self.claim_timeout_s = claim_timeout_s
        #: The epoch this owner claimed; None before its claim (no write is allowed).
        self.epoch: int | None = None

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    @staticmethod
    def _read(fd: int) -> int:
        raw = os.pread(fd, _EPOCH.size, 0)
        return _EPOCH.unpack(raw)[0] if len(raw) == _EPOCH.size else -1

    def claim(self, epoch: int) -> None:
        """Blocking: make ``epoch`` the container's Tier-2 epoch."""
        fd = self._open()
        try:
            deadline = time.monotonic() + self.claim_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:  # a paused owner is mid-write
                        raise StorageError(str(self.path), "Tier-2 fence held; retry") from None
                    time.sleep(0.05)
            found = self._read(fd)
            if found > epoch:
                raise StorageFencedError(str(self.path), f"epoch {found} claimed it, not {epoch}")
            if found != epoch:
                os.pwrite(fd, _EPOCH.pack(epoch), 0)
                os.fsync(fd)
            self.epoch = epoch
        finally:
            os.close(fd)  # releases the lock

    def run(self, fn: Callable[..., T], *args: object) -> T:
        """Blocking: ``fn(*args)`` while this owner's epoch is still the fence's."""
        mine = self.epoch
        if mine is None:
            raise StorageFencedError(str(self.path), "no epoch claimed")
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            found = self._read(fd)
            if found != mine:
                raise StorageFencedError(str(self.path), f"epoch {found} owns it now, not {mine}")
            return fn(*args)
        finally:
            os.close(fd)


class FencedStorage:
    """A container's view of Tier-2 for its storage writer: mutations go through the
    fence, reads straight to ``inner``."""

    def __init__(self, inner: Storage, fence: Tier2Fence) -> None:
        self.inner = inner
        self.fence = fence

    def create(self, name: str) -> SegmentInfo:
        return self.fence.run(self.inner.create, name)

    def write(self, name: str, offset: int, data: WriteData, *, durable: bool = True) -> None:
        self.fence.run(lambda: self.inner.write(name, offset, data, durable=durable))

    def seal(self, name: str) -> None:
        self.fence.run(self.inner.seal, name)

    def concat(self, target: str, target_offset: int, source: str) -> None:
        self.fence.run(self.inner.concat, target, target_offset, source)

    def truncate(self, name: str, offset: int) -> None:
        self.fence.run(self.inner.truncate, name, offset)

    def delete(self, name: str) -> None:
        self.fence.run(self.inner.delete, name)

    def get_info(self, name: str) -> SegmentInfo:
        return self.inner.get_info(name)

    def exists(self, name: str) -> bool:
        return self.inner.exists(name)

    def read(self, name: str, offset: int, length: int, read_ahead_max: int | None = None) -> bytes:
        return self.inner.read(name, offset, length, read_ahead_max)

    def list_segments(self) -> Iterator[str]:
        return self.inner.list_segments()

    def forget_cached(self, belongs: Callable[[str], bool]) -> None:
        self.inner.forget_cached(belongs)
