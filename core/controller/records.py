"""Controller metadata records and their stored form.

Every record is stored as compact JSON in a table segment (see ``metadata.py``). Floats
round-trip exactly through JSON (``repr`` is shortest-exact), so key-range bounds read
back equal to what was written. Segment ids are JSON integers; StreamCuts are objects
keyed by the decimal segment id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.core.controller.api import (
    EpochRecord,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    SegmentRecord,
    StreamConfig,
    StreamCut,
)

Json = Any


def dumps(value: Json) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()


def loads(data: bytes) -> Json:
    return json.loads(data)


# -- stream configuration -----------------------------------------------------------------


def config_to_json(c: StreamConfig) -> Json:
    return {
        "scaling": {
            "type": c.scaling.type.value,
            "target_rate": c.scaling.target_rate,
            "scale_factor": c.scaling.scale_factor,
            "min_segments": c.scaling.min_segments,
        },
        "retention": None if c.retention is None else _retention_to_json(c.retention),
        "tags": list(c.tags),
    }


def _retention_to_json(r: RetentionPolicy) -> Json:
    out: Json = {"type": r.type.value, "value": r.value}
    if r.bytes_max is not None:
        out["bytes_max"] = r.bytes_max
    return out


def config_from_json(d: Json) -> StreamConfig:
    s = d["scaling"]
    r = d["retention"]
    return StreamConfig(
        scaling=ScalingPolicy(
            type=ScalingType(s["type"]),
            target_rate=s["target_rate"],
            scale_factor=s["scale_factor"],
            min_segments=s["min_segments"],
        ),
        retention=None
        if r is None
        else RetentionPolicy(RetentionType(r["type"]), r["value"], r.get("bytes_max")),
        tags=tuple(d["tags"]),
    )


# -- segments, epochs, cuts -------------------------------------------------------------------


def segment_to_json(s: SegmentRecord) -> Json:
    return [s.id, s.creation_time_ms, s.key_start, s.key_end]


def segment_from_json(d: Json) -> SegmentRecord:
    return SegmentRecord(id=d[0], creation_time_ms=d[1], key_start=float(d[2]), key_end=float(d[3]))


def epoch_to_json(e: EpochRecord) -> Json:
    return {
        "epoch": e.epoch,
        "time": e.creation_time_ms,
        "segments": [segment_to_json(s) for s in e.segments],
    }


def epoch_from_json(d: Json) -> EpochRecord:
    return EpochRecord(
        epoch=d["epoch"],
        creation_time_ms=d["time"],
        segments=tuple(segment_from_json(s) for s in d["segments"]),
    )


def cut_to_json(cut: StreamCut) -> Json:
    return {str(k): v for k, v in sorted(cut.items())}


def cut_from_json(d: Json) -> dict[int, int]:
    return {int(k): int(v) for k, v in d.items()}


# -- internal records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SealedRecord:
    """A sealed segment: its final length and the first epoch it is not part of."""

    size: int
    sealed_epoch: int

    def to_json(self) -> Json:
        return [self.size, self.sealed_epoch]

    @staticmethod
    def from_json(d: Json) -> SealedRecord:
        return SealedRecord(size=d[0], sealed_epoch=d[1])


@dataclass(frozen=True, slots=True)
class TruncationRecord:
    """The head of the stream: data before ``cut`` is gone. So is every segment wholly
    before it (``History.before(cut)``), which is derived rather than stored, so the
    record stays the size of one StreamCut however long the history grows."""

    cut: Mapping[int, int]
    time_ms: int = 0

    def to_json(self) -> Json:
        return {"cut": cut_to_json(self.cut), "time": self.time_ms}

    @staticmethod
    def from_json(d: Json) -> TruncationRecord:
        return TruncationRecord(cut=cut_from_json(d["cut"]), time_ms=d["time"])


@dataclass(frozen=True, slots=True)
class RetentionCut:
    """An entry of the retention set: a tail StreamCut, when it was taken, and the bytes
    the stream held from its very beginning up to it."""

    time_ms: int
    cut: Mapping[int, int]
    recording_size: int

    def to_json(self) -> Json:
        return {"time": self.time_ms, "cut": cut_to_json(self.cut), "size": self.recording_size}

    @staticmethod
    def from_json(d: Json) -> RetentionCut:
        return RetentionCut(
            time_ms=d["time"], cut=cut_from_json(d["cut"]), recording_size=d["size"]
        )


class TxnState:
    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


@dataclass(frozen=True, slots=True)
class TxnRecord:
    id: str
    epoch: int
    segments: tuple[int, ...]
    lease_expiry_ms: int
    state: str
    created_ms: int
    commit_order: int = -1
    completed_ms: int = 0
    extra: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            "id": self.id,
            "epoch": self.epoch,
            "segments": list(self.segments),
            "lease": self.lease_expiry_ms,
            "state": self.state,
            "created": self.created_ms,
            "order": self.commit_order,
            "completed": self.completed_ms,
            "extra": dict(self.extra),
        }

    @staticmethod
    def from_json(d: Json) -> TxnRecord:
        return TxnRecord(
            id=d["id"],
            epoch=d["epoch"],
            segments=tuple(d["segments"]),
            lease_expiry_ms=d["lease"],
            state=d["state"],
            created_ms=d["created"],
            commit_order=d["order"],
            completed_ms=d["completed"],
            extra=dict(d["extra"]),
        )
