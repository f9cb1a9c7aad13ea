"""Which container a segment belongs to (the same answer on every node and process)."""

from __future__ import annotations

import crc32c


def container_of(name: str, container_count: int) -> int:
    """The container of a segment: crc32c of its *primary* name, modulo the count.

    The primary name drops a transaction suffix (``#transaction.<id>``) and an epoch
    suffix (``.#epoch.<n>``), as Pravega maps a transaction segment to its parent's
    container: a transaction segment, its parent and the parent's duplicates in later
    epochs (rolling transactions) share a container, so they can be merged."""
    base = name.split("#transaction.", 1)[0]
    cut = base.find(".#epoch.")
    if cut >= 0:
        base = base[:cut]
    return int(crc32c.crc32c(base.encode())) % container_count
