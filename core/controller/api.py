"""The controller as its callers (gateway, REST, gRPC) see it.

The controller owns scopes and streams: each stream's configuration, its epochs (each a
set of segments covering the key space ``[0, 1)`` exactly and disjointly), its state,
its truncation point and its transactions. Segment data lives in the segment store; the
controller creates, seals, truncates, merges and deletes segments there, and keeps its
own metadata in table segments.

Every mutating call is a workflow of idempotent steps: it returns once the stream is in
its new state durably; after a crash mid-way the workflow is completed (or rolled back)
when the controller starts again.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# ---------------------------------------------------------------------------------------
# Errors


class ControllerError(Exception):
    pass


class ScopeNotFoundError(ControllerError):
    pass


class ScopeExistsError(ControllerError):
    pass


class ScopeNotEmptyError(ControllerError):
    pass


class StreamNotFoundError(ControllerError):
    pass


class StreamExistsError(ControllerError):
    pass


class InvalidArgumentError(ControllerError):
    """A request that can never succeed as given (bad key ranges, bad policy, ...)."""


class ConflictError(ControllerError):
    """A request not allowed in the stream's current state (e.g. deleting an unsealed
    stream, a scale while another runs, truncating backwards)."""


class TransactionNotFoundError(ControllerError):
    pass


class KeyValueTableNotFoundError(ControllerError):
    pass


class KeyValueTableExistsError(ControllerError):
    pass


class ReaderGroupNotFoundError(ControllerError):
    pass


class ReaderGroupExistsError(ControllerError):
    pass


# ---------------------------------------------------------------------------------------
# Model


class ScalingType(enum.Enum):
    FIXED_NUM_SEGMENTS = "FIXED_NUM_SEGMENTS"
    BY_RATE_IN_KBYTES_PER_SEC = "BY_RATE_IN_KBYTES_PER_SEC"
    BY_RATE_IN_EVENTS_PER_SEC = "BY_RATE_IN_EVENTS_PER_SEC"


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    type: ScalingType = ScalingType.FIXED_NUM_SEGMENTS
    target_rate: int = 0
    scale_factor: int = 2
    min_segments: int = 1


class RetentionType(enum.Enum):
    TIME = "TIME"  # value in milliseconds
    SIZE = "SIZE"  # value in bytes


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    type: RetentionType
    value: int
    #: With ``TIME``, also a size bound in bytes: the stream is truncated as far as
    #: either limit allows (Kafka's ``retention.ms`` with ``retention.bytes``).
    bytes_max: int | None = None


@dataclass(frozen=True, slots=True)
class StreamConfig:
    scaling: ScalingPolicy = ScalingPolicy()
    retention: RetentionPolicy | None = None
    tags: tuple[str, ...] = ()


class StreamState(enum.Enum):
    CREATING = "CREATING"
    ACTIVE = "ACTIVE"
    UPDATING = "UPDATING"
    SCALING = "SCALING"
    TRUNCATING = "TRUNCATING"
    SEALING = "SEALING"
    SEALED = "SEALED"
    DELETING = "DELETING"


def segment_id(epoch: int, number: int) -> int:
    """64-bit segment id: high 32 bits the creation epoch, low 32 bits the number."""
    return (epoch << 32) | number


@dataclass(frozen=True, slots=True)
class KeyRange:
    start: float
    end: float

    def contains(self, key: float) -> bool:
        return self.start <= key < self.end


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    id: int
    creation_time_ms: int
    key_start: float
    key_end: float

    @property
    def epoch(self) -> int:
        return self.id >> 32

    @property
    def number(self) -> int:
        return self.id & 0xFFFFFFFF

    @property
    def key_range(self) -> KeyRange:
        return KeyRange(self.key_start, self.key_end)


@dataclass(frozen=True, slots=True)
class EpochRecord:
    epoch: int
    creation_time_ms: int
    segments: tuple[SegmentRecord, ...]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    scope: str
    stream: str
    config: StreamConfig
    state: StreamState
    current_epoch: int
    creation_time_ms: int


#: A StreamCut: segment id -> offset within that segment.
StreamCut = Mapping[int, int]


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    id: str
    scope: str
    stream: str
    epoch: int
    segments: tuple[SegmentRecord, ...]
    lease_expiry_ms: int
    state: str = "OPEN"
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Watermark:
    """Every writer of the stream had written all its events with times up to
    ``lower_time_ms`` at positions no later than ``stream_cut``, which is the upper bound
    of the writers' reported positions (it names only segments writers reported)."""

    lower_time_ms: int
    upper_time_ms: int
    stream_cut: Mapping[int, int]


@dataclass(frozen=True, slots=True)
class KeyValueTableInfo:
    scope: str
    name: str
    partitions: int
    state: str  # CREATING | ACTIVE | DELETING
    creation_time_ms: int
    #: the table segment of each partition, in partition order
    segments: tuple[str, ...]


class ReaderGroupRetention(enum.Enum):
    """Whether the reader group holds back the truncation of the streams it reads
    (consumption-based retention) and how it reports its position."""

    NONE = "NONE"
    MANUAL_RELEASE_AT_USER_STREAMCUT = "MANUAL_RELEASE_AT_USER_STREAMCUT"
    AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT = "AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT"


@dataclass(frozen=True, slots=True)
class ReaderGroupConfig:
    #: ``"scope/stream"`` -> the StreamCut to start reading at (``None``: the head).
    streams: Mapping[str, Mapping[int, int] | None]
    retention: ReaderGroupRetention = ReaderGroupRetention.NONE
    group_refresh_time_ms: int = 3_000
    automatic_checkpoint_interval_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class ReaderGroupInfo:
    scope: str
    name: str
    id: str
    #: raised by every update of the configuration
    generation: int
    config: ReaderGroupConfig


def qualified_segment_name(scope: str, stream: str, seg_id: int) -> str:
    """The segment store name of a stream segment (``scope/stream/number.#epoch.E``)."""
    return f"{scope}/{stream}/{seg_id & 0xFFFFFFFF}.#epoch.{seg_id >> 32}"


# ---------------------------------------------------------------------------------------
# The API


@dataclass(frozen=True, slots=True)
class KeyTraffic:
    """One routing key's smoothed incoming traffic over a long window (the rate) and a
    short one (``recent_``: how the rate is moving now)."""

    key: float
    bytes_per_second: float
    events_per_second: float
    recent_bytes_per_second: float
    recent_events_per_second: float


class RoutingKeyTraffic(Protocol):
    """A source of per-routing-key traffic for the auto-scaler (the Kafka gateway's
    per-partition rates, ``policies/autoscale.py``)."""

    def key_traffic(self, scope: str, stream: str) -> Sequence[KeyTraffic] | None:
        """Every routing key the stream uses, with its traffic. None when this source
        does not know the stream (the scaler uses segment traffic instead); empty when
        the stream's keys are not known yet (the scaler leaves the stream alone)."""
        ...


class Controller(Protocol):
    async def start(self) -> None:
        """Load metadata, finish interrupted workflows, start policy workers."""
        ...

    async def close(self) -> None: ...

    # -- scopes ------------------------------------------------------------------------
    async def create_scope(self, scope: str) -> None: ...

    async def delete_scope(self, scope: str) -> None: ...

    async def list_scopes(self) -> list[str]: ...

    # -- streams -----------------------------------------------------------------------
    async def create_stream(
        self,
        scope: str,
        stream: str,
        config: StreamConfig,
        key_ranges: Sequence[KeyRange] | None = None,
    ) -> StreamInfo:
        """Create with the given initial key ranges (which must cover [0, 1) exactly) or,
        if None, ``config.scaling.min_segments`` equal ranges. Raises
        ``StreamExistsError``, ``ScopeNotFoundError``, ``InvalidArgumentError``."""
        ...

    async def get_stream(self, scope: str, stream: str) -> StreamInfo: ...

    async def list_streams(self, scope: str, tag: str | None = None) -> list[str]: ...

    async def update_stream(self, scope: str, stream: str, config: StreamConfig) -> StreamInfo: ...

    async def seal_stream(self, scope: str, stream: str) -> None: ...

    async def delete_stream(self, scope: str, stream: str) -> None:
        """Only a sealed stream may be deleted (``ConflictError`` otherwise)."""
        ...

    # -- segments and epochs -----------------------------------------------------------
    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRecord]: ...

    async def get_head_segments(self, scope: str, stream: str) -> dict[int, int]:
        """The stream's head StreamCut (after truncation): segment id -> start offset."""
        ...

    async def get_segment_for_key(self, scope: str, stream: str, key: float) -> SegmentRecord: ...

    async def get_successors(
        self, scope: str, stream: str, seg_id: int
    ) -> dict[SegmentRecord, list[int]]:
        """Successor segments, each with the ids of all its predecessors."""
        ...

    async def get_epochs(self, scope: str, stream: str) -> list[EpochRecord]:
        """The scaling history, oldest first."""
        ...

    # -- workflows ---------------------------------------------------------------------
    async def scale(
        self,
        scope: str,
        stream: str,
        sealed_segments: Sequence[int],
        new_ranges: Sequence[KeyRange],
    ) -> EpochRecord:
        """Seal ``sealed_segments`` and create successors for ``new_ranges``, which must
        cover exactly the union of the sealed ranges. Returns the new epoch."""
        ...

    async def truncate(self, scope: str, stream: str, cut: StreamCut) -> None: ...
