"""``FileSystemStorage``: Tier-2 on a local or shared POSIX filesystem, the seed's
``RollingStorage``.

A segment is a directory of offset-preserving chunk files plus a small metadata file
(layout and name encoding in ``tier2/fsmeta.py``).

Writes. ``write`` appends to the last chunk with ``pwrite`` and ``fdatasync``s before it
returns; when the last chunk reaches ``chunk_bytes_max`` a new chunk file is created
(file fsynced, directory fsynced), then listed in the metadata (atomic replace), then
written. The length is not in the metadata: it is the last chunk's start plus its file
size. So a crash mid-write shows up as a shorter length holding a prefix of the data,
and the writer re-writes from the length it finds; a write at any offset other than the
length is ``BadOffsetError``. (A killed process leaves a clean prefix: the page cache
survives it. After power loss, ext4's default ``data=ordered`` still grows the size only
over written blocks; a filesystem without that ordering could show zeros in the torn
region, which Tier-2 holds no checksum to detect.) A write that raises rolls back what it wrote (chunk files
cut back to their old size, chunks it added removed) so the segment is as before.

Writes that need not be durable yet (``durable=False``: the storage writer sends a
segment's bytes as they come and syncs once per flush, so the disk takes them a few
hundred KiB at a time instead of megabytes at once) skip the ``fdatasync`` and start
the pages' write-back. They land in the last chunk only: a chunk is synced before the
next one is created, so a power failure can only cut the last chunk back to a prefix,
as above. The next durable write (an empty one just syncs), seal or concat syncs them.
A segment loaded from the disk counts its last chunk as unsynced: the instance that
wrote it may have been killed before it synced.

Truncation raises ``start_offset`` in the metadata first, then deletes the chunk files
that lie wholly below it and punches a hole (``fallocate``) in the first kept chunk up
to the block below it, so space is freed at the filesystem's block grain, not a chunk's;
offsets never shift. A crash in between leaves unlisted chunk
files below the start, which the next truncate removes.

Concat, from ``concat(target, offset, source)`` with the source sealed:

1. hard-link each source chunk into the target directory, named by its shifted start;
2. write ``<target>/meta.next`` (the target's new metadata plus ``concat_source``) and a
   marker ``<root>/.concat-pending/<source>``;
3. delete ``<source>/meta``: the commit point — from here the source does not exist;
4. rename ``meta.next`` over ``meta``, remove the source directory and the marker.

A crash before 3 rolls back, after it rolls forward, the first time the target is loaded
(``meta.next`` present) or the source name is created again (marker present). No data
is copied.

Missing data. A chunk that is listed but missing, or shorter than the metadata implies,
makes ``read`` raise ``DataMissingError``; a last chunk shorter than this process last
saw makes ``write`` raise it too, so holes are never filled with zeros.

Caching. Metadata and the last chunk's size are cached (``meta_cache_entries_max``
segments, least recently used evicted). That assumes one writer per segment at a time,
which the segment store guarantees (one owning container); a new instance reads the disk.
Containers move between nodes sharing Tier-2, so one that comes back to a node finds
lengths another node changed: a container's recovery calls ``forget_cached`` for its
segments before it reads Tier-2.
"""

from __future__ import annotations

import bisect
import os
import shutil
import threading
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tidegate.tier2.api import (
    BadOffsetError,
    DataMissingError,
    SegmentExistsError,
    SegmentInfo,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
    StorageError,
    WriteData,
    check_read_range,
)
from tidegate.tier2.fileio import as_views, split_views
from tidegate.tier2.fschunks import (
    append_to_chunk,
    create_empty_chunk,
    cut_back_chunk,
    punch_below,
    read_chunk,
    remove_unlisted_chunks,
    sync_chunk,
)
from tidegate.tier2.fsmeta import (
    META,
    META_NEXT,
    TRASH_PREFIX,
    Meta,
    chunk_file_name,
    encode_name,
    fsync_dir,
    read_json,
    write_json_atomic,
)

_PENDING_DIR = ".concat-pending"
_LOCK_STRIPES = 64


@dataclass
class _Seg:
    meta: Meta
    last_size: int  # size of the last chunk's file; 0 when there are no chunks

    @property
    def length(self) -> int:
        return self.meta.chunks[-1] + self.last_size if self.meta.chunks else self.meta.start_offset

    def chunk_end(self, i: int) -> int:
        chunks = self.meta.chunks
        return chunks[i + 1] if i + 1 < len(chunks) else self.length


class FileSystemStorage:
    def __init__(
        self,
        root: Path,
        *,
        chunk_bytes_max: int = 64 * 1024 * 1024,
        meta_cache_entries_max: int = 10_000,
        drop_written_pages: bool = False,
        read_ahead_bytes: int = 0,
    ) -> None:
        if chunk_bytes_max <= 0:
            raise ValueError("chunk_bytes_max must be positive")
        self.root = Path(root)
        self._chunk_bytes_max = chunk_bytes_max
        self._drop_written_pages = drop_written_pages
        self._read_ahead_bytes = read_ahead_bytes
        self._cache_max = meta_cache_entries_max
        self._cache: OrderedDict[str, _Seg] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._locks = [threading.RLock() for _ in range(_LOCK_STRIPES)]
        #: Segments whose last chunk holds bytes written without a sync: the segment
        #: offset where they start (kept apart from the evictable metadata cache).
        self._unsynced: dict[str, int] = {}
        (self.root / _PENDING_DIR).mkdir(parents=True, exist_ok=True)
        for entry in self.root.iterdir():
            if entry.name.startswith(TRASH_PREFIX):
                shutil.rmtree(entry, ignore_errors=True)

    # ----------------------------------------------------------------- plumbing

    def _lock(self, *names: str) -> _MultiLock:
        idx = sorted({zlib.crc32(n.encode()) % _LOCK_STRIPES for n in names})
        return _MultiLock([self._locks[i] for i in idx])

    def _dir(self, name: str) -> Path:
        return self.root / encode_name(name)

    def _cache_get(self, name: str) -> _Seg | None:
        with self._cache_lock:
            seg = self._cache.get(name)
            if seg is not None:
                self._cache.move_to_end(name)
            return seg

    def _cache_put(self, name: str, seg: _Seg) -> None:
        with self._cache_lock:
            self._cache[name] = seg
            self._cache.move_to_end(name)
            while len(self._cache) > self._cache_max:
                self._cache.popitem(last=False)

    def _cache_drop(self, name: str) -> None:
        with self._cache_lock:
            self._cache.pop(name, None)

    def _load(self, name: str) -> _Seg:
        """The segment's state; the caller holds its lock."""
        seg = self._cache_get(name)
        if seg is not None:
            return seg
        d = self._dir(name)
        try:
            if (d / META_NEXT).exists():
                self._finish_concat(d)
            meta = Meta.from_json(read_json(d / META))
        except FileNotFoundError:
            raise SegmentNotFoundError(name) from None
        except (OSError, ValueError) as e:
            raise StorageError(name, f"cannot load metadata: {e}") from e
        if meta.name != name:
            raise StorageError(name, f"directory {d.name} belongs to {meta.name!r}")
        last_size = 0
        if meta.chunks:
            try:
                last_size = (d / chunk_file_name(meta.chunks[-1])).stat().st_size
            except FileNotFoundError:
                raise DataMissingError(name, f"last chunk {meta.chunks[-1]} is missing") from None
        seg = _Seg(meta, last_size)
        if last_size and name not in self._unsynced:
            # Written by an instance that may have died before syncing it (a killed
            # process leaves its unsynced bytes in the page cache, not on the disk): the
            # next durable call syncs the last chunk whole.
            self._unsynced[name] = meta.chunks[-1]
        self._cache_put(name, seg)
        return seg

    def forget_cached(self, belongs: Callable[[str], bool]) -> None:
        with self._cache_lock:
            for name in [n for n in self._cache if belongs(n)]:
                del self._cache[name]
        # The next load marks the last chunk unsynced again, whoever wrote it.
        for name in [n for n in list(self._unsynced) if belongs(n)]:
            self._unsynced.pop(name, None)

    def _save_meta(self, name: str, meta: Meta) -> None:
        try:
            write_json_atomic(self._dir(name) / META, meta.to_json())
        except OSError as e:
            self._cache_drop(name)
            raise StorageError(name, f"metadata update failed: {e}") from e

    def _finish_concat(self, target_dir: Path) -> None:
        """Roll an interrupted concat forward (source gone) or back (source still there)."""
        source = read_json(target_dir / META_NEXT).get("concat_source")
        if not isinstance(source, str):
            raise ValueError(f"malformed {META_NEXT} in {target_dir}")
        source_dir = self._dir(source)
        if (source_dir / META).exists():
            current = Meta.from_json(read_json(target_dir / META))
            os.unlink(target_dir / META_NEXT)
            remove_unlisted_chunks(target_dir, current.chunks, below=None)
            fsync_dir(target_dir)
        else:
            os.replace(target_dir / META_NEXT, target_dir / META)
            fsync_dir(target_dir)
            self._remove_dir(source_dir)
        marker = self.root / _PENDING_DIR / encode_name(source)
        marker.unlink(missing_ok=True)

    def _remove_dir(self, d: Path) -> None:
        trash = self.root / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
        try:
            os.rename(d, trash)
        except FileNotFoundError:
            return
        fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)

    def _resolve_marker(self, source: str) -> None:
        marker = self.root / _PENDING_DIR / encode_name(source)
        try:
            target = read_json(marker)["target"]
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            raise StorageError(source, f"unreadable concat marker: {e}") from e
        if not isinstance(target, str):
            raise StorageError(source, "malformed concat marker")
        with self._lock(target, source):
            self._cache_drop(target)
            try:
                self._load(target)
            except SegmentNotFoundError:
                pass
            marker.unlink(missing_ok=True)

    # ---------------------------------------------------------------- lifecycle

    def create(self, name: str) -> SegmentInfo:
        self._resolve_marker(name)
        with self._lock(name):
            d = self._dir(name)
            if (d / META).exists():
                raise SegmentExistsError(name)
            try:
                if d.exists():  # leftovers of a concat source or a crashed create
                    self._remove_dir(d)
                d.mkdir()
                meta = Meta(name)
                write_json_atomic(d / META, meta.to_json())
                fsync_dir(self.root)
            except OSError as e:
                raise StorageError(name, f"create failed: {e}") from e
            self._cache_put(name, _Seg(meta, 0))
            return SegmentInfo(name, 0, 0, False)

    def exists(self, name: str) -> bool:
        with self._lock(name):
            if self._cache_get(name) is not None:
                return True
            try:
                self._load(name)
            except SegmentNotFoundError:
                return False
            except DataMissingError:
                return True
            return True

    def get_info(self, name: str) -> SegmentInfo:
        with self._lock(name):
            seg = self._load(name)
            return SegmentInfo(name, seg.length, seg.meta.start_offset, seg.meta.sealed)

    def seal(self, name: str) -> None:
        with self._lock(name):
            seg = self._load(name)
            self._sync_pending(name, seg)
            if seg.meta.sealed:
                return
            meta = Meta(name, seg.meta.start_offset, True, list(seg.meta.chunks))
            self._save_meta(name, meta)
            seg.meta = meta

    def delete(self, name: str) -> None:
        with self._lock(name):
            try:
                self._load(name)  # raises if missing; may finish a pending concat
            except DataMissingError:
                pass  # a damaged segment can still be deleted
            self._cache_drop(name)
            self._unsynced.pop(name, None)
            d = self._dir(name)
            try:
                os.unlink(d / META)
                fsync_dir(d)
            except OSError as e:
                raise StorageError(name, f"delete failed: {e}") from e
            self._remove_dir(d)

    def list_segments(self) -> Iterator[str]:
        names = []
        for entry in self.root.iterdir():
            if entry.name.startswith("."):
                continue
            try:
                meta = read_json(entry / META)
            except (FileNotFoundError, NotADirectoryError):
                continue
            name = meta.get("name")
            if isinstance(name, str):
                names.append(name)
        return iter(sorted(names))

    # -------------------------------------------------------------------- data

    def write(self, name: str, offset: int, data: WriteData, *, durable: bool = True) -> None:
        with self._lock(name):
            seg = self._load(name)
            if seg.meta.sealed:
                raise SegmentSealedError(name)
            if offset != seg.length:
                raise BadOffsetError(name, f"write at {offset}, length is {seg.length}")
            views = as_views(data)
            if not views:
                if durable:
                    self._sync_pending(name, seg)
                return
            chunks_before, last_size_before = len(seg.meta.chunks), seg.last_size
            try:
                while views:
                    if not seg.meta.chunks or seg.last_size >= self._chunk_bytes_max:
                        self._sync_pending(name, seg)  # every chunk but the last is synced
                        self._new_chunk(name, seg)
                    piece, views = split_views(views, self._chunk_bytes_max - seg.last_size)
                    self._append_to_last(name, seg, piece, durable)
            except BaseException:
                self._roll_back_write(name, seg, chunks_before, last_size_before)
                raise

    def _new_chunk(self, name: str, seg: _Seg) -> None:
        d = self._dir(name)
        start = seg.length
        try:
            create_empty_chunk(d, start)
        except OSError as e:
            raise StorageError(name, f"cannot create chunk {start}: {e}") from e
        meta = Meta(name, seg.meta.start_offset, seg.meta.sealed, [*seg.meta.chunks, start])
        self._save_meta(name, meta)
        seg.meta = meta
        seg.last_size = 0

    def _append_to_last(
        self, name: str, seg: _Seg, piece: list[memoryview], durable: bool
    ) -> None:
        start = seg.meta.chunks[-1]
        before = seg.length
        pending = self._unsynced.get(name)
        seg.last_size = append_to_chunk(
            name,
            self._dir(name),
            start,
            seg.last_size,
            piece,
            sync=durable,
            drop_pages=self._drop_written_pages,
            drop_from=None if pending is None else pending - start,
        )
        if durable:
            self._unsynced.pop(name, None)  # the one fdatasync covered them
        elif pending is None:
            self._unsynced[name] = before

    def _sync_pending(self, name: str, seg: _Seg) -> None:
        """Sync the bytes written without a sync (all in the last chunk)."""
        pending = self._unsynced.get(name)
        if pending is None:
            return
        start = seg.meta.chunks[-1]
        drop_from = pending - start if self._drop_written_pages else None
        sync_chunk(name, self._dir(name), start, drop_from=drop_from)
        del self._unsynced[name]

    def _roll_back_write(self, name: str, seg: _Seg, chunks_before: int, last_size: int) -> None:
        """Undo a failed write; if that fails too, forget the cache so the disk decides."""
        d = self._dir(name)
        try:
            added = seg.meta.chunks[chunks_before:]
            if added:
                meta = Meta(
                    name, seg.meta.start_offset, seg.meta.sealed, seg.meta.chunks[:chunks_before]
                )
                write_json_atomic(d / META, meta.to_json())
                seg.meta = meta
                for start in added:
                    (d / chunk_file_name(start)).unlink(missing_ok=True)
            if seg.meta.chunks:
                cut_back_chunk(d, seg.meta.chunks[-1], last_size)
            seg.last_size = last_size if seg.meta.chunks else 0
            pending = self._unsynced.get(name)
            if pending is not None and pending >= seg.length:
                del self._unsynced[name]
        except OSError:
            self._cache_drop(name)

    def read(self, name: str, offset: int, length: int, read_ahead_max: int | None = None) -> bytes:
        with self._lock(name):
            seg = self._load(name)
            check_read_range(name, offset, length, seg.meta.start_offset, seg.length)
            if length == 0:
                return b""
            # A plain string path: pathlib interns every part it parses, and interned
            # strings die with their last Path, so each read would insert into (and
            # now and then regrow) the interpreter's interned-string table.
            d = os.path.join(self.root, encode_name(name))
            chunks = seg.meta.chunks
            i = bisect.bisect_right(chunks, offset) - 1
            parts: list[bytes] = []
            pos, end = offset, offset + length
            ahead = self._read_ahead_bytes
            if read_ahead_max is not None:
                ahead = max(0, min(ahead, read_ahead_max))
            while pos < end:
                take = min(seg.chunk_end(i), end) - pos
                parts.append(read_chunk(name, d, chunks[i], pos - chunks[i], take, read_ahead=ahead))
                pos += take
                i += 1
            return parts[0] if len(parts) == 1 else b"".join(parts)

    def concat(self, target: str, target_offset: int, source: str) -> None:
        with self._lock(target, source):
            tgt = self._load(target)
            src = self._load(source)
            if target == source:
                raise BadOffsetError(target, "cannot concat a segment into itself")
            if tgt.meta.sealed:
                raise SegmentSealedError(target)
            if not src.meta.sealed:
                raise SegmentNotSealedError(source)
            if src.meta.start_offset != 0:
                raise BadOffsetError(source, "cannot concat a truncated source")
            if target_offset != tgt.length:
                raise BadOffsetError(target, f"concat at {target_offset}, length is {tgt.length}")
            if src.length == 0:
                self.delete(source)
                return
            # The target's last chunk stops being its last: synced first, like the
            # source's (its seal did that already).
            self._sync_pending(target, tgt)
            self._sync_pending(source, src)
            try:
                self._concat_files(target, tgt, source, src, target_offset)
            except OSError as e:
                self._cache_drop(target)
                self._cache_drop(source)
                raise StorageError(target, f"concat of {source} failed: {e}") from e

    def _concat_files(
        self, target: str, tgt: _Seg, source: str, src: _Seg, target_offset: int
    ) -> None:
        tdir, sdir = self._dir(target), self._dir(source)
        chunks = list(tgt.meta.chunks)
        if chunks and tgt.last_size == 0:
            chunks.pop()  # an empty last chunk would collide with the first adopted one
        for start in src.meta.chunks:
            dst = tdir / chunk_file_name(target_offset + start)
            dst.unlink(missing_ok=True)
            os.link(sdir / chunk_file_name(start), dst)
            chunks.append(target_offset + start)
        fsync_dir(tdir)
        new_meta = Meta(target, tgt.meta.start_offset, False, chunks)
        marker = self.root / _PENDING_DIR / encode_name(source)
        write_json_atomic(marker, {"target": target})
        write_json_atomic(tdir / META_NEXT, {**new_meta.to_json(), "concat_source": source})
        os.unlink(sdir / META)  # the commit point
        fsync_dir(sdir)
        self._cache_drop(source)
        os.replace(tdir / META_NEXT, tdir / META)
        fsync_dir(tdir)
        tgt.meta = new_meta
        tgt.last_size = src.last_size
        self._remove_dir(sdir)
        marker.unlink(missing_ok=True)

    def truncate(self, name: str, offset: int) -> None:
        with self._lock(name):
            seg = self._load(name)
            if offset > seg.length:
                raise BadOffsetError(name, f"truncate at {offset}, length is {seg.length}")
            if offset <= seg.meta.start_offset:
                return
            chunks = seg.meta.chunks
            keep = [c for i, c in enumerate(chunks) if seg.chunk_end(i) > offset]
            meta = Meta(name, offset, seg.meta.sealed, keep)
            self._save_meta(name, meta)
            seg.meta = meta
            if not keep:
                seg.last_size = 0
                self._unsynced.pop(name, None)  # its bytes are gone with their chunk
            d = self._dir(name)
            try:
                remove_unlisted_chunks(d, keep, below=keep[0] if keep else offset)
                fsync_dir(d)
                if keep:
                    punch_below(d, keep[0], offset)
            except OSError:
                pass  # the metadata is authoritative; the next truncate retries


class _MultiLock:
    def __init__(self, locks: list[threading.RLock]) -> None:
        self._locks = locks

    def __enter__(self) -> None:
        for lock in self._locks:
            lock.acquire()

    def __exit__(self, *exc: object) -> None:
        for lock in reversed(self._locks):
            lock.release()
