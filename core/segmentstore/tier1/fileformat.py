"""On-disk format of ``FileDurableDataLog``.

Directory::

    <dir>/<file_id>.log   a log file (file id zero-padded to 20 digits)
    <dir>/spare-<n>       a retired log file kept for reuse (see "Spare files")
    <dir>/meta.json       {"epoch": E, "start": [file_id, position] | null,
                           "ends": {"<file_id>": end_position, ...}}
    <dir>/lock            ``flock``ed around every read-modify-write of meta.json
    <dir>/epoch           the current owner's epoch, u64 big-endian, rewritten in place
                          (never replaced) by ``open`` right after meta.json, fsynced

A log file starts with a 16-byte header: ``b"TGDL"``, u32 format version (2), u64 epoch
of the owner that created it; then entries, each::

    [u32 length][u32 crc][payload: length bytes]        (big-endian)

where ``crc = crc32c(length field + payload)`` started from a seed that is the
crc32c of the file id (u64 big-endian). The CRC covers the length field too, so a
corrupted length is caught, and a run of zero bytes (unwritten space after a crash)
never parses as an entry. The seed makes an entry valid in one file only: a spare file
reused as another log file still holds the entries of its earlier life, and they fail
their CRC there, so the valid prefix ends where the new owner stopped writing. (Format
version 1, read but no longer written, had no seed; such files are never reused.)
A ``LogAddress`` is ``(file_id, byte position of the entry's length field)``.

``ends`` records where each closed file's valid entries end: a file is closed when its
owner rolls past it or when a later owner opens the log. Bytes past a recorded end are
ignored (a fenced owner may still be writing there). The owner's current file has no
recorded end. ``start`` is the truncation point: entries before it are gone even if
their file still exists (a crash between the metadata update and the file deletion).

Spare files (the Plog seed's pre-allocated plog). A file truncated away that its
owner created itself is renamed to a spare (up to a configured number of them) instead
of being deleted; an earlier owner's file is deleted (``retire_log_file``). The next roll
takes a spare instead of creating a file: writing over blocks a file already has lets
``fdatasync`` flush just the data, without the filesystem journal commit that growing a
file needs, and on ext4 that commit also waits for other files' pending data (Tier-2
writes), so syncs into a spare are shorter and steadier. A spare is claimed under the
metadata lock: its header is rewritten for the new owner, then it is hard-linked to its
log name (exclusive, like ``O_EXCL``) and the spare name removed. A crash in between
leaves one inode under both names; ``open`` removes such spare names.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
from tidegate.core.segmentstore.tier1.api import DataLogCorruptError, LogAddress

FILE_MAGIC = b"TGDL"
FILE_VERSION = 2
_FILE_VERSIONS = (1, 2)
FILE_HEADER = struct.Struct(">4sIQ")
FILE_HEADER_BYTES = FILE_HEADER.size
ENTRY_HEADER = struct.Struct(">II")
ENTRY_HEADER_BYTES = ENTRY_HEADER.size
_LENGTH = struct.Struct(">I")
LOG_SUFFIX = ".log"
META_FILE = "meta.json"
LOCK_FILE = "lock"
EPOCH_FILE = "epoch"
_EPOCH = struct.Struct(">Q")
_FILE_ID = struct.Struct(">Q")
SPARE_PREFIX = "spare-"


def entry_seed(file_id: int, version: int = FILE_VERSION) -> int:
    """Where the CRCs of ``file_id``'s entries start (format version 1: no seed)."""
    return 0 if version == 1 else int(crc32c.crc32c(_FILE_ID.pack(file_id)))


def entry_crc(seed: int, length_field: bytes | memoryview, payload: bytes | memoryview) -> int:
    return int(crc32c.crc32c(payload, crc32c.crc32c(length_field, seed)))


def entry_header(parts: list[memoryview], seed: int) -> bytes:
    """The header of an entry whose payload is ``parts`` back to back, in the file
    whose ``entry_seed`` is ``seed``."""
    length_field = _LENGTH.pack(sum(v.nbytes for v in parts))
    crc = crc32c.crc32c(length_field, seed)
    for v in parts:
        crc = crc32c.crc32c(v, crc)
    return length_field + _LENGTH.pack(crc)


def file_id_of(path: Path) -> int:
    return int(path.name[: -len(LOG_SUFFIX)])


def log_file_name(file_id: int) -> str:
    return f"{file_id:020d}{LOG_SUFFIX}"


def list_log_files(directory: Path) -> list[int]:
    ids = []
    for name in os.listdir(directory):
        if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit():
            ids.append(int(name[: -len(LOG_SUFFIX)]))
    return sorted(ids)


@dataclass
class LogMeta:
    epoch: int = 0
    start: LogAddress | None = None
    ends: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "epoch": self.epoch,
            "start": None if self.start is None else [self.start.file_id, self.start.position],
            "ends": {str(k): v for k, v in sorted(self.ends.items())},
        }

    @staticmethod
    def from_json(obj: dict[str, object]) -> LogMeta:
        epoch, start, ends = obj.get("epoch"), obj.get("start"), obj.get("ends")
        if not isinstance(epoch, int) or not isinstance(ends, dict):
            raise DataLogCorruptError(f"malformed log metadata: {obj!r}")
        addr = None
        if start is not None:
            if not (isinstance(start, list) and len(start) == 2):
                raise DataLogCorruptError(f"malformed log start: {start!r}")
            addr = LogAddress(int(start[0]), int(start[1]))
        return LogMeta(epoch, addr, {int(k): int(v) for k, v in ends.items()})


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_meta(directory: Path) -> tuple[LogMeta, int]:
    """The metadata and the inode of the file it came from (0 when there is none)."""
    path = directory / META_FILE
    try:
        with open(path, "rb") as f:
            ino = os.fstat(f.fileno()).st_ino
            obj = json.loads(f.read())
    except FileNotFoundError:
        return LogMeta(), 0
    except ValueError as e:
        raise DataLogCorruptError(f"{path}: {e}") from e
    if not isinstance(obj, dict):
        raise DataLogCorruptError(f"{path}: not a JSON object")
    return LogMeta.from_json(obj), ino


def write_meta(directory: Path, meta: LogMeta) -> int:
    """Atomically replace the metadata (temp file, fsync, rename, fsync dir); its inode."""
    path = directory / META_FILE
    tmp = directory / (META_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(meta.to_json()).encode())
        os.fsync(fd)
        ino = os.fstat(fd).st_ino
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)
    return ino


def write_epoch(directory: Path, epoch: int) -> None:
    """Record ``epoch`` in the epoch file, in place and durably (under the meta lock).
    Eight bytes at offset 0 lie in one sector and one page: readers see the old or the
    new value, never a mix, before and after a crash."""
    path = directory / EPOCH_FILE
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, _EPOCH.pack(epoch), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(directory)


def open_epoch(directory: Path) -> int:
    """A read-only descriptor of the epoch file, for ``read_epoch``."""
    return os.open(directory / EPOCH_FILE, os.O_RDONLY)


def read_epoch(fd: int) -> int:
    """The epoch recorded in the file open at ``fd``: one ``pread``, nothing parsed."""
    raw = os.pread(fd, _EPOCH.size, 0)
    if len(raw) != _EPOCH.size:
        raise DataLogCorruptError(f"epoch file holds {len(raw)} bytes")
    return int(_EPOCH.unpack(raw)[0])


@contextmanager
def meta_lock(directory: Path) -> Iterator[None]:
    """Exclusive across processes (``flock``) for a metadata read-modify-write."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def create_log_file(directory: Path, file_id: int, epoch: int) -> int:
    """Create ``file_id`` exclusively with its header, durably; an fd open for writing.

    Raises ``FileExistsError`` if the file exists (another owner got there first).
    """
    path = directory / log_file_name(file_id)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.pwrite(fd, FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, epoch), 0)
        os.fsync(fd)
        fsync_dir(directory)
    except BaseException:
        os.close(fd)
        raise
    return fd


def list_spares(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(SPARE_PREFIX))


def claim_spare(directory: Path, file_id: int, epoch: int) -> int | None:
    """Make a spare file log file ``file_id`` (call under the metadata lock); an fd
    open for writing, or None when there is no spare.

    Raises ``FileExistsError`` if ``file_id`` exists (another owner got there first).
    """
    target = directory / log_file_name(file_id)
    for name in list_spares(directory):
        spare = directory / name
        try:
            fd = os.open(spare, os.O_WRONLY)
        except FileNotFoundError:
            continue
        try:
            # The new header first: the log name never shows the old one. Its entries
            # fail their CRCs under the new file id, so the file reads as empty.
            os.pwrite(fd, FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, epoch), 0)
            os.link(spare, target)
        except BaseException:
            os.close(fd)
            raise
        os.unlink(spare)
        fsync_dir(directory)
        return fd
    return None


def retire_log_file(directory: Path, file_id: int, epoch: int, spares_max: int) -> None:
    """A log file truncated away: kept as a spare while fewer than ``spares_max`` exist,
    if the owner of ``epoch`` created it in the current format, else deleted.

    Only its own files: their writer (this owner's) has rolled past them for good. A
    file of an earlier owner is deleted, as a fenced owner may still hold it open and
    write into it once more; into a reused file, that would overwrite new entries."""
    path = directory / log_file_name(file_id)
    if spares_max > 0 and len(list_spares(directory)) < spares_max:
        try:
            with open(path, "rb") as f:
                head = f.read(FILE_HEADER_BYTES)
        except FileNotFoundError:
            return
        if len(head) == FILE_HEADER_BYTES and FILE_HEADER.unpack(head) == (
            FILE_MAGIC,
            FILE_VERSION,
            epoch,
        ):
            os.replace(path, directory / f"{SPARE_PREFIX}{file_id:020d}")
            return
    path.unlink(missing_ok=True)


def remove_linked_spares(directory: Path) -> None:
    """Remove spare names that share their file with a log file (a crash during
    ``claim_spare``): the log name holds it now."""
    for name in list_spares(directory):
        try:
            if os.stat(directory / name).st_nlink > 1:
                os.unlink(directory / name)
        except FileNotFoundError:
            pass


def _valid_entry_at(buf: memoryview, pos: int, size: int, seed: int) -> bool:
    if size - pos < ENTRY_HEADER_BYTES:
        return False
    length, crc = ENTRY_HEADER.unpack_from(buf, pos)
    end = pos + ENTRY_HEADER_BYTES + length
    return end <= size and entry_crc(seed, buf[pos : pos + 4], buf[pos + 8 : end]) == int(crc)


def _check_file_header(path: Path, buf: memoryview) -> int | None:
    """The entry seed of the file; None if it is empty or its header torn."""
    if len(buf) < FILE_HEADER_BYTES:
        return None
    magic, version, _epoch = FILE_HEADER.unpack_from(buf, 0)
    if magic == FILE_MAGIC and version in _FILE_VERSIONS:
        return entry_seed(file_id_of(path), version)
    if bytes(buf[:FILE_HEADER_BYTES]) == bytes(FILE_HEADER_BYTES):
        return None  # created, header never reached the disk
    raise DataLogCorruptError(f"{path}: not a log file (header {bytes(buf[:16])!r})")


def scan_valid_end(path: Path) -> int:
    """Where the valid entries of an unclosed file end; a torn tail is cut off on disk.

    An invalid entry (short header, length past the end of the file, bad CRC) ends the
    valid prefix: it is a torn tail if nothing valid follows it, and the file is cut
    there. If the bytes right after it (at its declared length) hold a valid entry, the
    damage is in the middle of the log and ``DataLogCorruptError`` is raised.
    """
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            end = 0
        else:
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
                buf = memoryview(mm)
                try:
                    end = _scan(path, buf, size)
                finally:
                    buf.release()
        if end < size:
            os.ftruncate(f.fileno(), end)
            os.fsync(f.fileno())
    return end


def _scan(path: Path, buf: memoryview, size: int) -> int:
    seed = _check_file_header(path, buf)
    if seed is None:
        return 0
    pos = FILE_HEADER_BYTES
    while pos < size:
        if size - pos < ENTRY_HEADER_BYTES:
            return pos
        length, crc = ENTRY_HEADER.unpack_from(buf, pos)
        end = pos + ENTRY_HEADER_BYTES + length
        if end > size:
            return pos
        if entry_crc(seed, buf[pos : pos + 4], buf[pos + 8 : end]) != crc:
            if _valid_entry_at(buf, end, size, seed):
                raise DataLogCorruptError(f"{path}: entry at {pos} fails its CRC")
            return pos
        pos = end
    return pos


def read_entries(
    path: Path, pos: int, end: int, bytes_max: int, skip_before: int = 0
) -> tuple[list[tuple[int, memoryview]], int]:
    """Entries of ``path`` from entry boundary ``pos`` (``FILE_HEADER_BYTES`` for the
    first) up to ``end``, CRC-verified, about ``bytes_max`` bytes of them (at least one);
    and the boundary to continue from. Entries before ``skip_before`` (which need not be
    a boundary) are stepped over by their headers, not read.

    The entries are read with one ``pread`` (the interpreter lock is released while the
    kernel copies) and handed out as slices of that buffer, not copied again: a reader
    thread that faulted in mmap pages and sliced them held the lock for as long as the
    copying took, stalling the event loop that decodes what it reads (recovery).
    """
    out: list[tuple[int, memoryview]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < end:
            raise DataLogCorruptError(f"{path}: {size} bytes, entries recorded up to {end}")
        if end <= FILE_HEADER_BYTES:
            return out, end
        seed = _check_file_header(path, memoryview(os.pread(fd, FILE_HEADER_BYTES, 0))) or 0
        pos = max(pos, FILE_HEADER_BYTES)
        while pos < end and pos < skip_before:
            if end - pos < ENTRY_HEADER_BYTES:
                raise DataLogCorruptError(f"{path}: truncated entry at {pos}")
            length, _ = ENTRY_HEADER.unpack(os.pread(fd, ENTRY_HEADER_BYTES, pos))
            if pos + ENTRY_HEADER_BYTES + length > end:
                raise DataLogCorruptError(f"{path}: entry at {pos} runs past {end}")
            pos += ENTRY_HEADER_BYTES + length
        if pos >= end:
            return out, pos
        want = min(end - pos, max(bytes_max, ENTRY_HEADER_BYTES))
        buf = memoryview(_pread_exact(fd, want, pos, path))
        if len(buf) >= ENTRY_HEADER_BYTES:
            (length,) = _LENGTH.unpack_from(buf, 0)
            if ENTRY_HEADER_BYTES + length > len(buf) and pos + ENTRY_HEADER_BYTES + length <= end:
                # One entry larger than the window: read exactly it.
                buf = memoryview(_pread_exact(fd, ENTRY_HEADER_BYTES + length, pos, path))
        at = 0
        n = len(buf)
        while at < n:
            if n - at < ENTRY_HEADER_BYTES:
                if pos + at + ENTRY_HEADER_BYTES > end:
                    raise DataLogCorruptError(f"{path}: truncated entry at {pos + at}")
                break  # the next entry starts in this window, ends past it
            length, crc = ENTRY_HEADER.unpack_from(buf, at)
            nxt = at + ENTRY_HEADER_BYTES + length
            if nxt > n:
                if pos + nxt > end:
                    raise DataLogCorruptError(f"{path}: entry at {pos + at} runs past {end}")
                break
            payload = buf[at + ENTRY_HEADER_BYTES : nxt]
            if entry_crc(seed, buf[at : at + 4], payload) != crc:
                raise DataLogCorruptError(f"{path}: entry at {pos + at} fails its CRC")
            out.append((pos + at, payload))
            at = nxt
    finally:
        os.close(fd)
    return out, pos + at


def _pread_exact(fd: int, length: int, offset: int, path: Path) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) != length:  # the file is at least ``end`` long: only a shrink does this
        raise DataLogCorruptError(f"{path}: {len(data)} bytes at {offset}, expected {length}")
    return data
