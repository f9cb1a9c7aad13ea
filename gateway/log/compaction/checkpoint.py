"""The cleaner's checkpoint of a compacted partition, kept in the offset index (``c``
key, written with sync together with the switch to a new clean segment)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

# end offset, generation, clean bytes, oldest kept tombstone's time, last generation,
# then the spans (a checkpoint of the first format has the first four only)
_FIRST_FORMAT = struct.Struct(">qqqq")
_CHECKPOINT = struct.Struct(">qqqqq")
_SPAN = struct.Struct(">qq")
NO_TOMBSTONE = (1 << 63) - 1
#: Spans kept at most: beyond, neighbours merge (the later time wins, which only keeps
#: tombstones longer).
SPANS_MAX = 32


@dataclass(frozen=True, slots=True)
class Checkpoint:
    #: Entries below this offset point into the clean segment of ``generation``.
    end_offset: int
    generation: int
    clean_bytes: int
    #: When the cleaner first saw the oldest tombstone (or removable marker) the clean
    #: segment holds: ``delete.retention.ms`` later, a pass runs to remove it even with
    #: nothing dirty.
    tombstone_ms: int = NO_TOMBSTONE
    #: ``(end offset, cleaned at ms)`` in offset order: the records below ``end offset``
    #: (and at or past the previous span's) were first cleaned at ``cleaned at``. A
    #: tombstone's delete horizon counts from then (Kafka's rule), not from its timestamp.
    spans: tuple[tuple[int, int], ...] = ()
    #: The highest generation the index may point into: above ``generation`` while a
    #: pass switches the index in steps (or one crashed half way); every generation from
    #: ``generation`` to it is live.
    last_generation: int = -1

    @property
    def generations(self) -> range:
        return range(self.generation, max(self.last_generation, self.generation) + 1)

    def first_cleaned_ms(self, offset: int, now_ms: int) -> int:
        """When the cleaner first saw ``offset``: ``now_ms`` for the dirty section."""
        for end, cleaned_ms in self.spans:
            if offset < end:
                return cleaned_ms
        return now_ms

    def with_span(self, end_offset: int, now_ms: int, log_start: int) -> tuple[tuple[int, int], ...]:
        """The spans after a pass cleaned up to ``end_offset`` at ``now_ms``."""
        spans = [s for s in self.spans if s[0] > log_start]
        if end_offset > self.end_offset:
            spans.append((end_offset, now_ms))
        while len(spans) > SPANS_MAX:
            i = min(range(len(spans) - 1), key=lambda j: spans[j + 1][1] - spans[j][1])
            spans[i : i + 2] = [(spans[i + 1][0], max(spans[i][1], spans[i + 1][1]))]
        return tuple(spans)

    def encode(self) -> bytes:
        head = _CHECKPOINT.pack(self.end_offset, self.generation, self.clean_bytes,
                                self.tombstone_ms, max(self.last_generation, self.generation))
        return head + b"".join(_SPAN.pack(*s) for s in self.spans)

    @staticmethod
    def decode(raw: bytes) -> Checkpoint:
        if len(raw) == _FIRST_FORMAT.size:  # no spans yet: as old as its oldest tombstone
            end, generation, clean_bytes, tombstone_ms = _FIRST_FORMAT.unpack(raw)
            first = ((end, 0 if tombstone_ms == NO_TOMBSTONE else tombstone_ms),)
            return Checkpoint(end, generation, clean_bytes, tombstone_ms, first, generation)
        end, generation, clean_bytes, tombstone_ms, last = _CHECKPOINT.unpack_from(raw)
        spans = tuple(_SPAN.unpack_from(raw, at)
                      for at in range(_CHECKPOINT.size, len(raw), _SPAN.size))
        return Checkpoint(end, generation, clean_bytes, tombstone_ms, spans, last)


def clean_end_offset(raw: bytes) -> int:
    return Checkpoint.decode(raw).end_offset
