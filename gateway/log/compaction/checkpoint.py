"""The cleaner's checkpoint of a compacted partition, kept in the offset index (``c``
key, written with sync together with the switch to a new clean segment)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

_CHECKPOINT = struct.Struct(">qqq")  # end offset, generation, clean bytes


@dataclass(frozen=True, slots=True)
class Checkpoint:
    #: Entries below this offset point into the clean segment of ``generation``.
    end_offset: int
    generation: int
    clean_bytes: int

    def encode(self) -> bytes:
        return _CHECKPOINT.pack(self.end_offset, self.generation, self.clean_bytes)

    @staticmethod
    def decode(raw: bytes) -> Checkpoint:
        return Checkpoint(*_CHECKPOINT.unpack(raw))


def clean_end_offset(raw: bytes) -> int:
    return Checkpoint.decode(raw).end_offset
