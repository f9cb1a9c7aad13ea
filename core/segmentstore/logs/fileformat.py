"""On-disk format of ``FileDurableDataLog``.

Directory::

    <dir>/<file_id>.log   a log file (file id zero-padded to 20 digits)
    <dir>/meta.json       {"epoch": E, "start": [file_id, position] | null,
                           "ends": {"<file_id>": end_position, ...}}
    <dir>/lock            ``flock``ed around every read-modify-write of meta.json
    <dir>/epoch           the current owner's epoch, u64 big-endian, rewritten in place
                          (never replaced) by ``open`` right after meta.json, fsynced

A log file starts with a 16-byte header: ``b"TGDL"``, u32 format version (1), u64 epoch
of the owner that created it; then entries, each::

    [u32 length][u32 crc][payload: length bytes]        (big-endian)

where ``crc = crc32c(length field + payload)``. The CRC covers the length field too, so
a corrupted length is caught, and a run of zero bytes (unwritten or preallocated space
after a crash) never parses as an entry: crc32c of an empty payload alone would be 0.
A ``LogAddress`` is ``(file_id, byte position of the entry's length field)``.

``ends`` records where each closed file's valid entries end: a file is closed when its
owner rolls past it or when a later owner opens the log. Bytes past a recorded end are
ignored (a fenced owner may still be writing there). The owner's current file has no
recorded end. ``start`` is the truncation point: entries before it are gone even if
their file still exists (a crash between the metadata update and the file deletion).
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

from core.segmentstore.logs.api import DataLogCorruptError, LogAddress

FILE_MAGIC = b"TGDL"
FILE_VERSION = 1
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


def entry_crc(length_field: bytes | memoryview, payload: bytes | memoryview) -> int:
    return int(crc32c.crc32c(payload, crc32c.crc32c(length_field)))


def entry_header(parts: list[memoryview]) -> bytes:
    """The header of an entry whose payload is ``parts`` back to back."""
    length_field = _LENGTH.pack(sum(v.nbytes for v in parts))
    crc = crc32c.crc32c(length_field)
    for v in parts:
        crc = crc32c.crc32c(v, crc)
    return length_field + _LENGTH.pack(crc)


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


def _valid_entry_at(buf: memoryview, pos: int, size: int) -> bool:
    if size - pos < ENTRY_HEADER_BYTES:
        return False
    length, crc = ENTRY_HEADER.unpack_from(buf, pos)
    end = pos + ENTRY_HEADER_BYTES + length
    return end <= size and entry_crc(buf[pos : pos + 4], buf[pos + 8 : end]) == int(crc)


def _check_file_header(path: Path, buf: memoryview) -> bool:
    """True if the file has a valid header; False if it is empty or its header torn."""
    if len(buf) < FILE_HEADER_BYTES:
        return False
    magic, version, _epoch = FILE_HEADER.unpack_from(buf, 0)
    if magic == FILE_MAGIC and version == FILE_VERSION:
        return True
    if bytes(buf[:FILE_HEADER_BYTES]) == bytes(FILE_HEADER_BYTES):
        return False  # created, header never reached the disk
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
    if not _check_file_header(path, buf):
        return 0
    pos = FILE_HEADER_BYTES
    while pos < size:
        if size - pos < ENTRY_HEADER_BYTES:
            return pos
        length, crc = ENTRY_HEADER.unpack_from(buf, pos)
        end = pos + ENTRY_HEADER_BYTES + length
        if end > size:
            return pos
        if entry_crc(buf[pos : pos + 4], buf[pos + 8 : end]) != crc:
            if _valid_entry_at(buf, end, size):
                raise DataLogCorruptError(f"{path}: entry at {pos} fails its CRC")
            return pos
        pos = end
    return pos


def read_entries(
    path: Path, pos: int, end: int, bytes_max: int, skip_before: int = 0
) -> tuple[list[tuple[int, bytes]], int]:
    """Entries of ``path`` from entry boundary ``pos`` (``FILE_HEADER_BYTES`` for the
    first) up to ``end``, CRC-verified, about ``bytes_max`` bytes of them (at least one);
    and the boundary to continue from. Entries before ``skip_before`` (which need not be
    a boundary) are stepped over, not returned.
    """
    out: list[tuple[int, bytes]] = []
    taken = 0
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < end:
            raise DataLogCorruptError(f"{path}: {size} bytes, entries recorded up to {end}")
        if end <= FILE_HEADER_BYTES:
            return out, end
        with mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ) as mm:
            with memoryview(mm) as buf:
                _check_file_header(path, buf)
            # Slicing the mmap copies each payload once into the bytes returned; no
            # memoryview outlives the map.
            pos = max(pos, FILE_HEADER_BYTES)
            while pos < end and (not out or taken < bytes_max):
                if end - pos < ENTRY_HEADER_BYTES:
                    raise DataLogCorruptError(f"{path}: truncated entry at {pos}")
                length, crc = ENTRY_HEADER.unpack_from(mm, pos)
                nxt = pos + ENTRY_HEADER_BYTES + length
                if nxt > end:
                    raise DataLogCorruptError(f"{path}: entry at {pos} runs past {end}")
                if pos >= skip_before:
                    payload = mm[pos + 8 : nxt]
                    if entry_crc(mm[pos : pos + 4], payload) != crc:
                        raise DataLogCorruptError(f"{path}: entry at {pos} fails its CRC")
                    out.append((pos, payload))
                    taken += length + ENTRY_HEADER_BYTES
                pos = nxt
    return out, pos
