"""On-disk layout of ``FileSystemStorage``: segment directory names, the metadata file,
and the fsync discipline that makes its updates atomic.

Layout under the storage root::

    <root>/<encoded name>/meta             JSON: name, start_offset, sealed, chunks
    <root>/<encoded name>/meta.next        a concat in progress (see filesystem.py)
    <root>/<encoded name>/<start>.chunk    bytes [start, start + size) of the segment
    <root>/.trash-*                        directories being deleted

``chunks`` lists the chunk start offsets in increasing order. Chunk ``i`` ends where
chunk ``i + 1`` starts; the last chunk ends at its file's size, which is what makes the
segment's length: a metadata update is not needed for a write, only for a new chunk.
With no chunks the length equals ``start_offset``.

Segment names may contain ``/``, ``#``, ``.`` and any other character: every character
outside ``[A-Za-z0-9_-]`` is written as ``%XX`` per UTF-8 byte, so an encoded name never
starts with ``.`` (reserved for the store's own files) and never contains a separator.
Names whose encoding would exceed ``_NAME_BYTES_MAX`` keep a prefix plus a SHA-256 of
the whole name (``~`` is never produced by the escaping, so the forms cannot collide);
the real name is always in ``meta``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_NAME_BYTES_MAX = 200
META = "meta"
META_NEXT = "meta.next"
CHUNK_SUFFIX = ".chunk"
TRASH_PREFIX = ".trash-"


def encode_name(name: str) -> str:
    raw = name.encode("utf-8")
    enc = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)
    if not enc:
        enc = "%"  # the empty name; "%" alone is never produced otherwise
    if len(enc) > _NAME_BYTES_MAX:
        enc = enc[:100] + "~" + hashlib.sha256(raw).hexdigest()
    return enc


def chunk_file_name(start: int) -> str:
    # Zero-padded so a directory listing sorts by offset; 20 digits hold any u64.
    return f"{start:020d}{CHUNK_SUFFIX}"


def parse_chunk_file_name(file_name: str) -> int | None:
    if not file_name.endswith(CHUNK_SUFFIX):
        return None
    digits = file_name[: -len(CHUNK_SUFFIX)]
    return int(digits) if digits.isdigit() else None


@dataclass
class Meta:
    name: str
    start_offset: int = 0
    sealed: bool = False
    chunks: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "start_offset": self.start_offset,
            "sealed": self.sealed,
            "chunks": self.chunks,
        }

    @staticmethod
    def from_json(obj: dict[str, object]) -> Meta:
        name = obj.get("name")
        start = obj.get("start_offset")
        sealed = obj.get("sealed")
        chunks = obj.get("chunks")
        if not (
            isinstance(name, str)
            and isinstance(start, int)
            and isinstance(sealed, bool)
            and isinstance(chunks, list)
            and all(isinstance(c, int) for c in chunks)
        ):
            raise ValueError(f"malformed segment metadata: {obj!r}")
        return Meta(name, start, sealed, list(chunks))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj: dict[str, object]) -> None:
    """Replace ``path`` with ``obj`` so a crash leaves the old or the new content.

    Write a temporary file, fsync it, rename it over ``path``, fsync the directory.
    """
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(obj, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json(path: Path) -> dict[str, object]:
    with open(path, "rb") as f:
        obj = json.loads(f.read())
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: not a JSON object")
    return obj
