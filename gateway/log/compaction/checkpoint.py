"""The cleaner's checkpoint of a compacted partition, kept in the offset index (``c``
key, written with sync together with the switch to a new clean segment)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

# end offset, generation, clean bytes, oldest kept tombstone's timestamp
_CHECKPOINT = struct.Struct(">qqqq")
NO_TOMBSTONE = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    #: Entries below this offset point into the clean segment of ``generation``.
    end_offset: int
    generation: int
    clean_bytes: int
    #: The timestamp of the oldest tombstone the clean segment holds: once it is
    #: ``delete.retention.ms`` old, a pass runs to remove it even with nothing dirty.
    tombstone_ms: int = NO_TOMBSTONE

    def encode(self) -> bytes:
        return _CHECKPOINT.pack(
            self.end_offset, self.generation, self.clean_bytes, self.tombstone_ms)

    @staticmethod
    def decode(raw: bytes) -> Checkpoint:
        return Checkpoint(*_CHECKPOINT.unpack(raw))


def clean_end_offset(raw: bytes) -> int:
    return Checkpoint.decode(raw).end_offset
