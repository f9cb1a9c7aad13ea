"""The conformance scenario, written once and run by every client family.

Records cover keyed and unkeyed records over several partitions, headers, null keys and
null values, a 1 MB record, and explicit timestamps; each compression codec the client
supports gets its own topic. ``check`` compares what came back with what was sent,
byte-exact, partition by partition, at dense offsets from 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PARTITIONS = 3
RECORDS_PER_CODEC = 24
BIG_RECORD_BYTES = 1_000_000
#: Timestamps of the scenario: T0 + i seconds for record i.
T0_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def records(seed: int, big: bool = True, binary: bool = True) -> list[Rec]:
    rng = random.Random(seed)
    out: list[Rec] = []
    for i in range(RECORDS_PER_CODEC):
        partition = i % PARTITIONS
        key: bytes | None = f"key-{i}".encode() if i % 3 or i % 7 == 3 else None
        if binary:
            value: bytes | None = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        else:
            value = f"value-{i}-{rng.getrandbits(32)}".encode()
        if i % 7 == 3:
            value = None
        headers = (("h1", f"x{i}".encode()), ("h2", b"")) if i % 2 else ()
        out.append(Rec(partition, key, value, headers, T0_MS + i * 1000))
    if big:
        value = bytes(rng.getrandbits(8) for _ in range(64)) * (BIG_RECORD_BYTES // 64)
        out.append(Rec(1, b"big", value, (), T0_MS + RECORDS_PER_CODEC * 1000))
    return out


def by_partition(recs: list[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for r in recs:
        out[r.partition].append(r)
    return out


def check(sent: list[Rec], got: dict[int, list[tuple[int, Rec]]], with_timestamps: bool = True) -> None:
    """``got``: per partition, ``(offset, record)`` in consumption order."""
    expected = by_partition(sent)
    for p in range(PARTITIONS):
        offsets = [o for o, _ in got.get(p, [])]
        assert offsets == list(range(len(expected[p]))), f"partition {p}: offsets {offsets}"
        for (offset, rec), want in zip(got[p], expected[p], strict=True):
            assert rec.key == want.key, f"p{p}@{offset} key"
            assert rec.value == want.value, f"p{p}@{offset} value"
            assert rec.headers == want.headers, f"p{p}@{offset} headers"
            if with_timestamps:
                assert rec.timestamp_ms == want.timestamp_ms, f"p{p}@{offset} timestamp"


def expected_offset_for_time(sent: list[Rec], partition: int, ts_ms: int) -> int:
    """Kafka's answer to ListOffsets(ts): first offset with timestamp >= ts, else -1."""
    for offset, r in enumerate(by_partition(sent)[partition]):
        if r.timestamp_ms >= ts_ms:
            return offset
    return -1
