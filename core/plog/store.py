"""``PlogStore``: one plog server's plogs on its local disk.

Files, under ``<data dir>/plogs/``::

    <id>.plog   [b"TGPL"][u32 version 1][u64 capacity], then one chunk per append:
                [u64 offset][u32 length][u32 crc32c(offset, length, data)][data]
    <id>.seal   JSON {"end": E, "epoch": N}: sealed at ``E`` by owner epoch ``N``
                (written to a temporary name, fsynced, renamed, directory fsynced)

A plog's durable end is where its valid chunks end; loading scans them (a torn last
chunk fails its CRC and is cut off). Appends are group-committed: the event loop
accepts an append (its offset must be the plog's current end, and it must fit the
capacity), assigns its file position and hands it to one writer thread, which writes
every queued chunk with ``pwritev``, calls ``fdatasync`` once per touched file and
then answers them all. An append ahead of the current end (it overtook an earlier one)
waits, bounded, in the plog's reassembly buffer until the gap is filled (the seed's
append reassembly). Sealing stops appends at once, waits for those already accepted
to be durable, then seals at the smaller of the asked and the durable end; a seal by an
older epoch than the plog's seal epoch is refused (FENCED), so a fenced owner cannot
lower what a newer one sealed.

Capacity (the seed's pre-allocated block): a plog's whole capacity is reserved when it
is created, so appends never find the disk full. A create is refused (NO_SPACE) when the
free space less what unsealed plogs may still write, less ``disk_free_bytes_min``, cannot
hold it, or when the plogs' bytes, written and reserved, would pass ``disk_bytes_max``.
Sealing or deleting a plog gives its unused reservation back.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import os
import struct
import threading
from array import array
from collections.abc import Callable
from pathlib import Path

import crc32c
from tidegate.core.plog.wire import OFFSET_MAX, U64, U64U64, PlogInfo, Status
from tidegate.tier2.fileio import pwritev_all

log = logging.getLogger(__name__)

FILE_HEADER = struct.Struct(">4sIQ")
MAGIC = b"TGPL"
CHUNK_HEADER = struct.Struct(">QII")
PLOG_SUFFIX = ".plog"
SEAL_SUFFIX = ".seal"

#: ``reply(status, body parts)``: how an append is answered, once, on the event loop.
Reply = Callable[[int, list[bytes | memoryview]], None]


class _Plog:
    def __init__(self, plog_id: str, fd: int, capacity: int, durable: int, file_end: int) -> None:
        self.id = plog_id
        self.fd = fd
        self.capacity = capacity
        self.durable = durable  # logical end made durable
        self.accepted = durable  # logical end handed to the writer
        self.file_end = file_end  # where the next chunk goes in the file
        self.sealed: int | None = None
        self.seal_epoch = 0
        self.sealing = False  # appends refused from the first seal request on
        self.broken = False  # a write failed: refuse appends, keep what is durable
        #: Chunk starts: logical offsets and their file positions (header included).
        self.offsets = array("Q")
        self.positions = array("Q")
        #: Reassembly: appends ahead of ``accepted``, by offset.
        self.waiting: dict[int, tuple[memoryview, Reply]] = {}
        self.waiting_bytes = 0
        self.in_flight = 0
        self.drained = asyncio.Event()
        self.drained.set()
        self.lock = asyncio.Lock()  # one seal or delete at a time

    def readable_end(self) -> int:
        return self.durable if self.sealed is None else min(self.sealed, self.durable)


_Write = tuple[_Plog, int, int, list[memoryview], Reply]  # plog, file pos, new end, bufs, reply


class PlogStore:
    def __init__(
        self,
        data_dir: Path,
        *,
        capacity_bytes_max: int = 1 << 32,
        reassembly_bytes_max: int = 16 * 1024 * 1024,
        reassembly_appends_max: int = 1024,
        disk_bytes_max: int | None = None,
        disk_free_bytes_min: int = 64 * 1024 * 1024,
    ) -> None:
        self.directory = Path(data_dir) / "plogs"
        self.capacity_bytes_max = capacity_bytes_max
        self.disk_bytes_max = disk_bytes_max
        self.disk_free_bytes_min = disk_free_bytes_min
        #: Bytes promised to plogs being created (not in ``plogs`` yet).
        self._creating_bytes = 0
        self.reassembly_bytes_max = reassembly_bytes_max
        self.reassembly_appends_max = reassembly_appends_max
        self.plogs: dict[str, _Plog] = {}
        self._creating: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cv = threading.Condition()
        self._queue: list[_Write] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.syncs = 0

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.directory.mkdir(parents=True, exist_ok=True)
        loaded = await asyncio.to_thread(self._load_all)
        for p in loaded:
            self.plogs[p.id] = p
        self._thread = threading.Thread(target=self._writer, name="plog-writer", daemon=True)
        self._thread.start()

    def _load_all(self) -> list[_Plog]:
        out = []
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".tmp"):
                (self.directory / name).unlink(missing_ok=True)
            elif name.endswith(PLOG_SUFFIX):
                try:
                    out.append(self._load(name[: -len(PLOG_SUFFIX)]))
                except (OSError, ValueError) as exc:
                    log.error("plog %s not loaded: %r", name, exc)
        return out

    def _load(self, plog_id: str) -> _Plog:
        path = self.directory / (plog_id + PLOG_SUFFIX)
        fd = os.open(path, os.O_RDWR)
        try:
            head = os.pread(fd, FILE_HEADER.size, 0)
            if len(head) < FILE_HEADER.size:
                raise ValueError("short header")
            magic, version, capacity = FILE_HEADER.unpack(head)
            if magic != MAGIC or version != 1:
                raise ValueError(f"not a plog file: {magic!r} v{version}")
            offsets, positions = array("Q"), array("Q")
            pos, end = FILE_HEADER.size, 0
            size = os.fstat(fd).st_size
            while pos + CHUNK_HEADER.size <= size:
                off, n, crc = CHUNK_HEADER.unpack(os.pread(fd, CHUNK_HEADER.size, pos))
                if off != end or pos + CHUNK_HEADER.size + n > size:
                    break
                data = os.pread(fd, n, pos + CHUNK_HEADER.size)
                if crc32c.crc32c(data, crc32c.crc32c(CHUNK_HEADER.pack(off, n, 0)[:12])) != crc:
                    break
                offsets.append(off)
                positions.append(pos)
                pos += CHUNK_HEADER.size + n
                end += n
            if pos < size:
                os.ftruncate(fd, pos)  # a torn tail: never acknowledged
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        p = _Plog(plog_id, fd, capacity, end, pos)
        p.offsets, p.positions = offsets, positions
        seal_path = self.directory / (plog_id + SEAL_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            seal = json.loads(seal_path.read_text())
            p.sealed, p.seal_epoch, p.sealing = int(seal["end"]), int(seal["epoch"]), True
        return p

    async def close(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        for p in self.plogs.values():
            with contextlib.suppress(OSError):
                os.close(p.fd)
        self.plogs.clear()

    # ------------------------------------------------------------ operations

    def ids(self) -> list[str]:
        return list(self.plogs)

    def info(self, plog_id: str) -> PlogInfo | None:
        p = self.plogs.get(plog_id)
        if p is None:
            return None
        return PlogInfo(p.readable_end(), p.sealed is not None, p.seal_epoch, p.capacity)

    async def create(self, plog_id: str, capacity: int) -> tuple[int, bytes]:
        if plog_id in self.plogs or plog_id in self._creating:
            return Status.EXISTS, b"plog exists"
        if capacity > self.capacity_bytes_max:
            return Status.TOO_LARGE, f"capacity above {self.capacity_bytes_max}".encode()
        try:
            refused = self._no_room_for(capacity)  # on the loop: no create passes it twice
        except OSError as exc:
            return Status.IO_ERROR, repr(exc).encode()
        if refused:
            return Status.NO_SPACE, refused.encode()
        self._creating.add(plog_id)
        self._creating_bytes += capacity
        try:
            fd = await asyncio.to_thread(self._create_file, plog_id, capacity)
        except OSError as exc:
            return Status.IO_ERROR, repr(exc).encode()
        finally:
            self._creating.discard(plog_id)
            self._creating_bytes -= capacity
        self.plogs[plog_id] = _Plog(plog_id, fd, capacity, 0, FILE_HEADER.size)
        return Status.OK, b""

    def reserved_bytes(self) -> int:
        """What unsealed plogs (and those being created) may still write."""
        open_room = sum(p.capacity - p.accepted for p in self.plogs.values() if not p.sealing)
        return open_room + self._creating_bytes

    def _no_room_for(self, capacity: int) -> str:
        """Why a plog of ``capacity`` bytes cannot be promised ("" if it can)."""
        reserved = self.reserved_bytes()
        if self.disk_bytes_max is not None:
            written = sum(p.file_end for p in self.plogs.values())
            if written + reserved + capacity > self.disk_bytes_max:
                return (f"{written} bytes written and {reserved} reserved: no room for "
                        f"{capacity} within disk_bytes_max {self.disk_bytes_max}")
        st = os.statvfs(self.directory)
        free = st.f_bavail * st.f_frsize
        if free - reserved - capacity < self.disk_free_bytes_min:
            return (f"{free} bytes free, {reserved} reserved: no room for {capacity} "
                    f"and {self.disk_free_bytes_min} kept free")
        return ""

    def _create_file(self, plog_id: str, capacity: int) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / (plog_id + PLOG_SUFFIX)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            # Not listed (the caller checked): a create whose request was cancelled
            # while this thread ran left it, never written. Every later create of the
            # id failed on it (IO_ERROR), a re-replication's retries among them.
            (self.directory / (plog_id + SEAL_SUFFIX)).unlink(missing_ok=True)
            path.unlink()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.pwrite(fd, FILE_HEADER.pack(MAGIC, 1, capacity), 0)
            os.fdatasync(fd)
            _fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        return fd

    def append(self, plog_id: str, offset: int, data: memoryview, reply: Reply) -> None:
        """Accept, hold for reassembly, or refuse one append; ``reply`` answers it once."""
        p = self.plogs.get(plog_id)
        if p is None:
            return reply(Status.NOT_FOUND, [b"no such plog"])
        if p.sealing:
            return reply(Status.SEALED, [_sealed_body(p)])
        if p.broken:
            return reply(Status.IO_ERROR, [b"an earlier write to this plog failed"])
        if offset + len(data) > p.capacity:
            return reply(Status.FULL, [f"append past capacity {p.capacity}".encode()])
        if offset < p.accepted or offset in p.waiting:
            return reply(Status.BAD_OFFSET, [U64.pack(p.accepted)])
        if offset > p.accepted:
            full = p.waiting_bytes + len(data) > self.reassembly_bytes_max
            if full or len(p.waiting) >= self.reassembly_appends_max:
                return reply(Status.BUSY, [b"reassembly buffer full"])
            p.waiting[offset] = (data, reply)
            p.waiting_bytes += len(data)
            return None
        self._accept(p, data, reply)
        while p.accepted in p.waiting:
            data, reply = p.waiting.pop(p.accepted)
            p.waiting_bytes -= len(data)
            self._accept(p, data, reply)
        return None

    def _accept(self, p: _Plog, data: memoryview, reply: Reply) -> None:
        off, n = p.accepted, len(data)
        head = bytearray(CHUNK_HEADER.pack(off, n, 0))  # the writer thread fills in the CRC
        p.offsets.append(off)
        p.positions.append(p.file_end)
        item: _Write = (p, p.file_end, off + n, [memoryview(head), data], reply)
        p.file_end += CHUNK_HEADER.size + n
        p.accepted = off + n
        p.in_flight += 1
        p.drained.clear()
        with self._cv:
            self._queue.append(item)
            self._cv.notify()

    async def read(self, plog_id: str, offset: int, max_bytes: int) -> tuple[int, list[bytes]]:
        p = self.plogs.get(plog_id)
        if p is None:
            return Status.NOT_FOUND, [b"no such plog"]
        end = p.readable_end()
        want = max(0, min(max_bytes, end - offset))
        head = U64.pack(end) + bytes([p.sealed is not None])
        if want == 0:
            return Status.OK, [head]
        # Chunks holding [offset, offset + want): logical start, file position, length.
        i = bisect.bisect_right(p.offsets, offset) - 1
        spans: list[tuple[int, int]] = []
        pos, left = offset, want
        while left > 0 and i < len(p.offsets):
            start = p.offsets[i]
            stop = p.offsets[i + 1] if i + 1 < len(p.offsets) else p.accepted
            take = min(stop - pos, left)
            spans.append((p.positions[i] + CHUNK_HEADER.size + (pos - start), take))
            pos += take
            left -= take
            i += 1
        fd = p.fd
        p.in_flight += 1  # delete waits for it: the descriptor stays open meanwhile
        p.drained.clear()
        try:
            parts = await asyncio.to_thread(lambda: [os.pread(fd, n, at) for at, n in spans])
        except OSError as exc:
            return Status.IO_ERROR, [repr(exc).encode()]
        finally:
            p.in_flight -= 1
            if p.in_flight == 0:
                p.drained.set()
        return Status.OK, [head, *parts]

    async def seal(self, plog_id: str, epoch: int, offset: int) -> tuple[int, bytes]:
        p = self.plogs.get(plog_id)
        if p is None:
            return Status.NOT_FOUND, b"no such plog"
        async with p.lock:
            if epoch < p.seal_epoch:
                return Status.FENCED, _sealed_body(p)
            p.sealing = True
            p.seal_epoch = epoch
            for _, reply in p.waiting.values():
                reply(Status.SEALED, [_sealed_body(p)])
            p.waiting.clear()
            p.waiting_bytes = 0
            await p.drained.wait()
            end = min(offset, p.durable, OFFSET_MAX if p.sealed is None else p.sealed)
            try:
                await asyncio.to_thread(self._write_seal, plog_id, end, epoch)
            except OSError as exc:
                return Status.IO_ERROR, repr(exc).encode()
            p.sealed = end
            return Status.OK, U64.pack(end)

    def _write_seal(self, plog_id: str, end: int, epoch: int) -> None:
        tmp = self.directory / (plog_id + SEAL_SUFFIX + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"end": end, "epoch": epoch}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / (plog_id + SEAL_SUFFIX))
        _fsync_dir(self.directory)

    async def delete(self, plog_id: str) -> tuple[int, bytes]:
        p = self.plogs.pop(plog_id, None)
        if p is None:
            return Status.OK, b""
        p.sealing = True
        for _, reply in p.waiting.values():
            reply(Status.NOT_FOUND, [b"plog deleted"])
        p.waiting.clear()
        await p.drained.wait()
        try:
            await asyncio.to_thread(self._delete_files, p)
        except OSError as exc:
            return Status.IO_ERROR, repr(exc).encode()
        return Status.OK, b""

    def _delete_files(self, p: _Plog) -> None:
        os.close(p.fd)
        for suffix in (SEAL_SUFFIX, PLOG_SUFFIX):
            (self.directory / (p.id + suffix)).unlink(missing_ok=True)
        _fsync_dir(self.directory)

    # ------------------------------------------------------------ writer thread

    def _writer(self) -> None:
        loop = self._loop
        assert loop is not None
        while True:
            with self._cv:
                while not self._queue and not self._stopping:
                    self._cv.wait()
                batch, self._queue = self._queue, []
            if not batch:
                return
            error: OSError | None = None
            try:
                fds: dict[int, None] = {}
                for p, pos, _, bufs, _ in batch:
                    head, data = bufs
                    crc = crc32c.crc32c(data, crc32c.crc32c(head[:12]))
                    struct.pack_into(">I", head, 12, crc)
                    pwritev_all(p.fd, bufs, pos)
                    fds[p.fd] = None
                for fd in fds:
                    os.fdatasync(fd)
                self.syncs += 1
            except OSError as exc:
                error = exc
            loop.call_soon_threadsafe(self._on_written, batch, error)

    def _on_written(self, batch: list[_Write], error: OSError | None) -> None:
        for p, _, end, _, reply in batch:
            p.in_flight -= 1
            if error is not None:
                p.broken = True
                reply(Status.IO_ERROR, [repr(error).encode()])
            elif not p.broken:
                p.durable = end
                reply(Status.OK, [U64.pack(end)])
            else:
                reply(Status.IO_ERROR, [b"an earlier write to this plog failed"])
            if p.in_flight == 0:
                p.drained.set()


def _sealed_body(p: _Plog) -> bytes:
    return U64U64.pack(p.sealed if p.sealed is not None else p.accepted, p.seal_epoch)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
