"""``FileDurableDataLog``: the Tier-1 durable data log on a local filesystem.

Format and directory layout: ``fileformat.py``. Behaviour:

- Group commit. ``append`` queues the entry (no copy) and awaits. One writer thread
  takes every queued entry, writes them with ``os.pwritev`` (headers and payload
  memoryviews interleaved), calls ``os.fdatasync`` once, then completes the futures on
  the event loop (``call_soon_threadsafe``) in append order, calling each entry's
  ``on_done`` right after its future. While it syncs, new appends queue up for the next
  batch. Bytes handed to the writer and not yet synced are bounded by
  ``in_flight_bytes_max``; further appends wait, in order, in ``_pending``.
- Rolling. A file is closed when the next entry would take it past ``file_bytes_max``
  (a file always takes at least one entry): its end is recorded in the metadata, then the
  next file is made from a spare or else created with ``O_EXCL``. Truncation keeps up
  to ``spare_files`` of the owner's own truncated files as spares (``fileformat.py``).
- Fencing. ``open`` bumps the epoch in the metadata and the epoch file (under
  ``flock``), creates a new file for itself, then records the valid end of every earlier
  file that had none (cutting a torn tail). A fenced owner notices on its next batch:
  after each ``fdatasync`` the writer rereads the epoch file (one ``pread`` on a
  descriptor it keeps open); a newer epoch fails the batch with ``DataLogFencedError``
  and closes the log. Its later bytes lie past the recorded end of its file and are
  never read. Its rolls fail too (epoch checked under the lock, next file id taken with
  ``O_EXCL``).
- Failure. Any I/O error fails the batch with ``DataLogError``; every later or queued
  append fails with ``DataLogClosedError``; the log is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

from tidegate.core.segmentstore.callbacks import DoneCallback, call_now, when_done
from tidegate.core.segmentstore.tier1.api import (
    DataLogClosedError,
    DataLogCorruptError,
    DataLogError,
    DataLogFencedError,
    Entry,
    EntryData,
    LogAddress,
)
from tidegate.core.segmentstore.tier1.fileformat import (
    ENTRY_HEADER_BYTES,
    FILE_HEADER_BYTES,
    claim_spare,
    create_log_file,
    entry_header,
    entry_seed,
    fsync_dir,
    list_log_files,
    log_file_name,
    meta_lock,
    open_epoch,
    read_entries,
    read_epoch,
    read_meta,
    remove_linked_spares,
    retire_log_file,
    scan_valid_end,
    write_epoch,
    write_meta,
)
from tidegate.core.segmentstore.tier1.timing import LatencyCounts
from tidegate.tier2.fileio import as_views, pwritev_all

_READ_BATCH_BYTES = 4 * 1024 * 1024
ENTRY_BYTES_MAX = 0xFFFFFFFF  # the u32 length field; refused without closing the log

#: An entry (its parts, written back to back), its size, its future, its ``on_done``.
_Item = tuple[list[memoryview], int, "asyncio.Future[LogAddress]", DoneCallback | None]


class FileDurableDataLog:
    def __init__(
        self,
        directory: Path,
        *,
        file_bytes_max: int = 256 * 1024 * 1024,
        in_flight_bytes_max: int = 64 * 1024 * 1024,
        spare_files: int = 2,
        drop_written_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.directory = Path(directory)
        self._spare_files = spare_files
        self._drop_written_bytes = drop_written_bytes
        self._file_bytes_max = file_bytes_max
        self._in_flight_bytes_max = in_flight_bytes_max
        self._epoch = 0
        self._state = "new"  # new -> open -> closed
        self._failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Event-loop side: appends waiting for room, and the bytes handed to the writer.
        self._pending: deque[_Item] = deque()
        self._in_flight_bytes = 0
        # Shared with the writer thread, under ``_cv``.
        self._cv = threading.Condition()
        self._queue: list[_Item] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._meta_lock = threading.Lock()  # in-process companion of the flock
        # Writer-thread state (read by the loop only when the writer is idle or stopped).
        self._fd = -1
        self._epoch_fd = -1
        self._file_id = 0
        self._seed = 0  # ``entry_seed`` of the current file
        self._pos = 0
        self._drop_from = 0  # synced bytes of the current file before this were dropped
        self._synced = LogAddress(0, 0)
        #: Each ``pwritev`` + ``fdatasync`` of a batch, in seconds (writer thread only):
        #: how long the disk held acknowledgements back (exported as metrics).
        self.write_sync_seconds = LatencyCounts()

    @property
    def syncs(self) -> int:
        """``fdatasync`` calls the writer made, for benchmarks and tests."""
        return sum(self.write_sync_seconds.counts)

    @property
    def epoch(self) -> int:
        return self._epoch

    # -------------------------------------------------------------------- open

    async def open(self) -> None:
        if self._state != "new":
            raise DataLogError(f"cannot open a log that is {self._state}")
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._open_sync)
        self._state = "open"
        self._thread = threading.Thread(
            target=self._writer, name=f"tier1-writer:{self.directory.name}", daemon=True
        )
        self._thread.start()

    def _open_sync(self) -> None:
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        with self._meta_lock, meta_lock(d):
            meta, _ = read_meta(d)
            meta.epoch += 1
            write_meta(d, meta)
            # Before any earlier file is scanned below: see ``_check_fenced``.
            write_epoch(d, meta.epoch)
            remove_linked_spares(d)
        self._epoch = meta.epoch
        self._epoch_fd = open_epoch(d)
        start_id = meta.start.file_id if meta.start else 0
        for fid in list_log_files(d):
            if fid < start_id:  # truncated away; a crash left the file behind
                (d / log_file_name(fid)).unlink(missing_ok=True)
        fid = max([*list_log_files(d), *meta.ends, start_id]) + 1
        while True:
            try:
                self._fd = self._take_file(fid)
                break
            except FileExistsError:
                fid += 1  # a fenced owner rolled into it concurrently
        self._file_id, self._seed, self._pos = fid, entry_seed(fid), FILE_HEADER_BYTES
        self._synced = LogAddress(fid, FILE_HEADER_BYTES)
        try:
            # Listed after our file exists: a fenced owner can no longer add one below it.
            earlier = [f for f in list_log_files(d) if start_id <= f < fid]
            ends = {f: scan_valid_end(d / log_file_name(f)) for f in earlier if f not in meta.ends}
            with self._meta_lock, meta_lock(d):
                meta, _ = read_meta(d)
                if meta.epoch != self._epoch:
                    raise DataLogFencedError(
                        f"epoch {self._epoch} fenced during open by {meta.epoch}"
                    )
                meta.ends.update(ends)
                write_meta(d, meta)
        except BaseException:
            os.close(self._fd)
            os.close(self._epoch_fd)
            self._fd = self._epoch_fd = -1
            raise

    # ------------------------------------------------------------------ append

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise DataLogClosedError("log closed after a failed append") from self._failed
        if self._state != "open" or self._stopping:
            raise DataLogClosedError(f"log is {self._state}")

    async def append(self, entry: Entry) -> LogAddress:
        return await self.append_future(entry)

    def append_future(
        self, entry: Entry, on_done: DoneCallback | None = None
    ) -> asyncio.Future[LogAddress]:
        fut: asyncio.Future[LogAddress] = (self._loop or asyncio.get_running_loop()).create_future()
        try:
            self._check_usable()
            views = as_views(entry)
            size = sum(v.nbytes for v in views)
            if size > ENTRY_BYTES_MAX:
                raise DataLogError(f"entry of {size} bytes exceeds {ENTRY_BYTES_MAX}")
        except DataLogError as exc:
            fut.set_exception(exc)
            when_done(fut, on_done)
            return fut
        self._pending.append((views, size, fut, on_done))
        self._admit()
        return fut

    def _admit(self) -> None:
        admitted: list[_Item] = []
        while self._pending:
            size = self._pending[0][1] + ENTRY_HEADER_BYTES
            if self._in_flight_bytes and self._in_flight_bytes + size > self._in_flight_bytes_max:
                break
            self._in_flight_bytes += size
            admitted.append(self._pending.popleft())
        if admitted:
            with self._cv:
                self._queue.extend(admitted)
                self._cv.notify()

    def _on_written(self, batch: list[_Item], addrs: list[LogAddress]) -> None:
        self._in_flight_bytes -= sum(size + ENTRY_HEADER_BYTES for _, size, _, _ in batch)
        for (_, _, fut, on_done), addr in zip(batch, addrs, strict=True):
            if not fut.done():
                fut.set_result(addr)
                if on_done is not None:
                    call_now(on_done, fut)
        if self._failed is None:
            self._admit()

    def _on_failed(self, exc: BaseException, batch: list[_Item]) -> None:
        self._failed = exc
        self._in_flight_bytes = 0
        closed = DataLogClosedError("log closed after a failed append")
        closed.__cause__ = exc
        with self._cv:
            rest, self._queue = self._queue, []
        rest.extend(self._pending)
        self._pending.clear()
        for items, error in ((batch, exc), (rest, closed)):
            for _, _, fut, on_done in items:
                if not fut.done():
                    fut.set_exception(error)
                    if on_done is not None:
                        call_now(on_done, fut)

    # ------------------------------------------------------------------ writer

    def _writer(self) -> None:
        loop = self._loop
        assert loop is not None
        while True:
            with self._cv:
                while not self._queue and not self._stopping:
                    self._cv.wait()
                batch, self._queue = self._queue, []
            if not batch:
                return  # stopping and drained
            try:
                addrs = self._write_batch(batch)
                self._check_fenced()
            except BaseException as e:  # noqa: BLE001 - every failure closes the log
                exc = e if isinstance(e, DataLogError) else DataLogError(f"write failed: {e!r}")
                if exc is not e:
                    exc.__cause__ = e
                loop.call_soon_threadsafe(self._on_failed, exc, batch)
                return
            loop.call_soon_threadsafe(self._on_written, batch, addrs)
            if self._drop_written_bytes and self._pos - self._drop_from >= self._drop_written_bytes:
                self._drop_synced()  # after the acknowledgement: never delays it

    def _write_batch(self, batch: list[_Item]) -> list[LogAddress]:
        addrs: list[LogAddress] = []
        i = 0
        while i < len(batch):
            first = batch[i][1] + ENTRY_HEADER_BYTES
            if self._pos > FILE_HEADER_BYTES and self._pos + first > self._file_bytes_max:
                self._roll()
            bufs: list[memoryview] = []
            start = pos = self._pos
            while i < len(batch):
                views, size, _, _ = batch[i]
                size += ENTRY_HEADER_BYTES
                if pos > start and pos + size > self._file_bytes_max:
                    break
                # The CRC runs here, off the event loop (crc32c releases the GIL).
                bufs.append(memoryview(entry_header(views, self._seed)))
                bufs += views
                addrs.append(LogAddress(self._file_id, pos))
                pos += size
                i += 1
            began = time.monotonic()
            pwritev_all(self._fd, bufs, start)
            os.fdatasync(self._fd)
            self.write_sync_seconds.observe(time.monotonic() - began)
            self._pos = pos
            self._synced = LogAddress(self._file_id, pos)
        return addrs

    def _check_fenced(self) -> None:
        # Sound: a new owner writes its epoch to the epoch file before it scans the
        # earlier files for their ends. If this read, made after our fdatasync, still
        # shows our epoch, that scan has not begun and will count the bytes we just
        # synced; if it shows another, the batch fails and nothing in it is
        # acknowledged. One pread on a kept descriptor: each syscall the writer thread
        # makes costs a GIL hand-back from a busy event loop (reading meta.json took
        # five). Stat-based checks are unsound: ext4 reuses the inode
        # number of a replaced file at once, and its timestamps are jiffy-grained.
        epoch = read_epoch(self._epoch_fd)
        if epoch != self._epoch:
            raise DataLogFencedError(f"epoch {self._epoch} fenced by {epoch}")

    def _drop_synced(self) -> None:
        """Let the kernel free the page cache holding this file's synced bytes. Tier-1
        is read back only at recovery and for data the cache evicted before it reached
        Tier-2, and a page cache growing with every byte logged made each write slower:
        new pages for it come cold from free memory, pages just freed come warm.
        One call per ``drop_written_bytes`` synced, after the acknowledgement: each
        syscall of this thread waits for the GIL behind the event loop, and dropping
        after every batch showed p99 outliers."""
        if self._drop_written_bytes and self._pos > self._drop_from:
            n = self._pos - self._drop_from
            with contextlib.suppress(OSError):  # advice only: nothing depends on it
                os.posix_fadvise(self._fd, self._drop_from, n, os.POSIX_FADV_DONTNEED)
        self._drop_from = self._pos

    def _roll(self) -> None:
        self._drop_synced()
        d = self.directory
        with self._meta_lock, meta_lock(d):
            meta, _ = read_meta(d)
            if meta.epoch != self._epoch:
                raise DataLogFencedError(f"epoch {self._epoch} fenced by {meta.epoch}")
            meta.ends[self._file_id] = self._pos
            write_meta(d, meta)
        try:
            fd = self._take_file(self._file_id + 1)
        except FileExistsError:
            raise DataLogFencedError(f"file {self._file_id + 1} taken by a newer owner") from None
        os.close(self._fd)
        self._fd = fd
        self._file_id += 1
        self._seed = entry_seed(self._file_id)
        self._pos = self._drop_from = FILE_HEADER_BYTES

    def _take_file(self, file_id: int) -> int:
        """Log file ``file_id``, made from a spare (claimed under the lock, so no two
        owners take the same one) or else created; ``FileExistsError`` if it exists."""
        d = self.directory
        with self._meta_lock, meta_lock(d):
            fd = claim_spare(d, file_id, self._epoch)
        return fd if fd is not None else create_log_file(d, file_id, self._epoch)

    # ------------------------------------------------------------ read, truncate

    async def read(
        self, start: LogAddress | None = None
    ) -> AsyncIterator[tuple[LogAddress, EntryData]]:
        if self._state == "new":
            raise DataLogClosedError("open the log before reading it")
        meta, _ = await asyncio.to_thread(read_meta, self.directory)
        lower = max(a for a in (start, meta.start, LogAddress(0, 0)) if a is not None)
        synced = self._synced
        # Every file below ours has a recorded end (``open`` saw to that), so a recorded
        # file that is missing on disk is a hole, not an end.
        ends = {f: e for f, e in meta.ends.items() if lower.file_id <= f < synced.file_id}
        if synced.file_id >= lower.file_id:
            ends[synced.file_id] = synced.position
        for fid, end in sorted(ends.items()):
            path = self.directory / log_file_name(fid)
            skip = lower.position if fid == lower.file_id else 0
            pos = FILE_HEADER_BYTES
            while pos < end:
                try:
                    entries, pos = await asyncio.to_thread(
                        read_entries, path, pos, end, _READ_BATCH_BYTES, skip
                    )
                except FileNotFoundError:
                    raise DataLogCorruptError(f"log file {fid} is missing") from None
                for p, data in entries:
                    yield LogAddress(fid, p), data

    async def truncate(self, upto: LogAddress) -> None:
        self._check_usable()
        if upto > self._synced:
            raise DataLogError(f"truncate at {upto}, past the durable end {self._synced}")
        await asyncio.to_thread(self._truncate_sync, upto)

    def _truncate_sync(self, upto: LogAddress) -> None:
        d = self.directory
        with self._meta_lock, meta_lock(d):
            meta, _ = read_meta(d)
            if meta.epoch != self._epoch:
                raise DataLogFencedError(f"epoch {self._epoch} fenced by {meta.epoch}")
            if meta.start is not None and upto <= meta.start:
                return
            meta.start = upto
            meta.ends = {f: e for f, e in meta.ends.items() if f >= upto.file_id}
            write_meta(d, meta)
        for fid in list_log_files(d):
            if fid < upto.file_id:
                retire_log_file(d, fid, self._epoch, self._spare_files)
        fsync_dir(d)

    # ------------------------------------------------------------------- close

    async def close(self) -> None:
        """Make every append made so far durable (or failed), then stop."""
        if self._state == "closed":
            return
        if self._state == "new":
            self._state = "closed"
            return
        while self._pending and self._failed is None:
            await asyncio.sleep(0.001)  # wait for room so pending entries reach the writer
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        await asyncio.sleep(0)  # let the writer's last completions run
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._epoch_fd >= 0:
            os.close(self._epoch_fd)
            self._epoch_fd = -1
        self._state = "closed"

