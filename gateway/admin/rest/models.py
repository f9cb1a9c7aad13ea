"""JSON bodies of the admin REST API and their conversion to and from the controller model.

Field names are those of the controller's REST API (``scopeName``, ``scalingPolicy``,
``minSegments``, ...). Retention on the wire is Pravega's: ``LIMITED_DAYS`` (days) and
``LIMITED_SIZE_MB`` (MiB); the controller keeps milliseconds and bytes. A value that is
not a whole number of days or MiB (set through gRPC, say) is shown as a fraction.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StringConstraints,
    model_serializer,
    model_validator,
)
from tidegate.core.controller.api import (
    EpochRecord,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    SegmentRecord,
    StreamConfig,
    StreamInfo,
)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MS_PER_DAY = 86_400_000
BYTES_PER_MB = 1 << 20
#: Upper bounds of the retention values, so that ms and bytes stay within 63 bits.
RETENTION_DAYS_MAX = 1_000_000
RETENTION_MB_MAX = 1 << 40
#: Static bounds of list fields; the configurable ones are in ``RestLimits``.
TAGS_MAX = 128
LIST_ITEMS_MAX = 4096

#: Scope and stream names: Kafka's topic alphabet, which is also Pravega's plus ``_``.
NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
Name = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=NAME_PATTERN)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f]+$")]
SegmentId = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]
#: A segment id as a JSON object key: a decimal string, so not strict.
SegmentIdKey = Annotated[int, Field(ge=0, le=INT64_MAX)]
Offset = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]
Key = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Message(BaseModel):
    """Every error response: 400, 404, 409, 413, 503 (and 500 for our own faults)."""

    message: str


class Health(BaseModel):
    status: Literal["ready", "starting"]
    #: While starting: what the node waits for (containers, plog servers, ZooKeeper).
    waiting_for: str | None = None


# -- scopes ------------------------------------------------------------------------------


class ScopeProperty(_Body):
    scopeName: Name


class ScopesList(BaseModel):
    scopes: list[ScopeProperty]


# -- stream configuration ----------------------------------------------------------------


class ScalingConfig(_Body):
    type: ScalingType = ScalingType.FIXED_NUM_SEGMENTS
    targetRate: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = 0
    scaleFactor: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] = 2
    minSegments: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] = 1

    def to_model(self) -> ScalingPolicy:
        return ScalingPolicy(self.type, self.targetRate, self.scaleFactor, self.minSegments)

    @classmethod
    def of(cls, p: ScalingPolicy) -> ScalingConfig:
        return cls(
            type=p.type,
            targetRate=p.target_rate,
            scaleFactor=p.scale_factor,
            minSegments=p.min_segments,
        )


class RetentionKind(enum.Enum):
    LIMITED_DAYS = "LIMITED_DAYS"
    LIMITED_SIZE_MB = "LIMITED_SIZE_MB"


class RetentionConfig(_Body):
    type: RetentionKind
    value: Annotated[float, Field(gt=0, allow_inf_nan=False)] | Annotated[StrictInt, Field(gt=0)]
    #: With ``LIMITED_DAYS``, also a size bound: truncated as far as either limit allows
    #: (a Kafka topic's ``retention.ms`` with ``retention.bytes``).
    maxSizeMB: (
        Annotated[float, Field(gt=0, le=RETENTION_MB_MAX, allow_inf_nan=False)]
        | Annotated[StrictInt, Field(gt=0, le=RETENTION_MB_MAX)]
        | None
    ) = None

    @model_validator(mode="after")
    def _bounded(self) -> RetentionConfig:
        days = self.type is RetentionKind.LIMITED_DAYS
        limit = RETENTION_DAYS_MAX if days else RETENTION_MB_MAX
        if self.value > limit:
            raise ValueError(f"value must be at most {limit} for {self.type.value}")
        if self._raw() < 1:
            raise ValueError("value is below 1 ms / 1 byte")
        if self.maxSizeMB is not None:
            if not days:
                raise ValueError("maxSizeMB goes with LIMITED_DAYS only")
            if round(self.maxSizeMB * BYTES_PER_MB) < 1:
                raise ValueError("maxSizeMB is below 1 byte")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_bound(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if isinstance(out, dict) and out.get("maxSizeMB") is None:
            out.pop("maxSizeMB", None)
        return out

    def _raw(self) -> int:
        unit = MS_PER_DAY if self.type is RetentionKind.LIMITED_DAYS else BYTES_PER_MB
        return round(self.value * unit)

    def to_model(self) -> RetentionPolicy:
        kind = RetentionType.TIME if self.type is RetentionKind.LIMITED_DAYS else RetentionType.SIZE
        bytes_max = None if self.maxSizeMB is None else round(self.maxSizeMB * BYTES_PER_MB)
        return RetentionPolicy(kind, self._raw(), bytes_max)

    @classmethod
    def of(cls, p: RetentionPolicy) -> RetentionConfig:
        days = p.type is RetentionType.TIME
        unit = MS_PER_DAY if days else BYTES_PER_MB
        size_mb = None if p.bytes_max is None else _in_units(p.bytes_max, BYTES_PER_MB)
        return cls.model_construct(
            type=RetentionKind.LIMITED_DAYS if days else RetentionKind.LIMITED_SIZE_MB,
            value=_in_units(p.value, unit), maxSizeMB=size_mb,
        )


def _in_units(raw: int, unit: int) -> int | float:
    """Whole units as an int, else a float."""
    whole, rest = divmod(raw, unit)
    return whole if rest == 0 else raw / unit


class CreateStreamRequest(_Body):
    streamName: Name
    scalingPolicy: ScalingConfig | None = None
    retentionPolicy: RetentionConfig | None = None
    tags: Annotated[list[Tag], Field(max_length=TAGS_MAX)] = []

    def to_model(self) -> StreamConfig:
        return StreamConfig(
            scaling=(self.scalingPolicy or ScalingConfig()).to_model(),
            retention=self.retentionPolicy.to_model() if self.retentionPolicy else None,
            tags=tuple(dict.fromkeys(self.tags)),
        )


class UpdateStreamRequest(_Body):
    """Fields left out keep their current value; ``"retentionPolicy": null`` removes the
    retention policy."""

    scalingPolicy: ScalingConfig | None = None
    retentionPolicy: RetentionConfig | None = None
    tags: Annotated[list[Tag], Field(max_length=TAGS_MAX)] | None = None

    def apply_to(self, current: StreamConfig) -> StreamConfig:
        given = self.model_fields_set
        scaling = current.scaling
        if "scalingPolicy" in given:
            scaling = (self.scalingPolicy or ScalingConfig()).to_model()
        retention = current.retention
        if "retentionPolicy" in given:
            retention = self.retentionPolicy.to_model() if self.retentionPolicy else None
        tags = current.tags
        if self.tags is not None:
            tags = tuple(dict.fromkeys(self.tags))
        return StreamConfig(scaling=scaling, retention=retention, tags=tags)


class StreamProperty(BaseModel):
    scopeName: str
    streamName: str
    scalingPolicy: ScalingConfig
    retentionPolicy: RetentionConfig | None
    tags: list[str]
    streamState: str
    currentEpoch: int
    creationTime: int

    @classmethod
    def of(cls, info: StreamInfo) -> StreamProperty:
        c = info.config
        return cls(
            scopeName=info.scope,
            streamName=info.stream,
            scalingPolicy=ScalingConfig.of(c.scaling),
            retentionPolicy=RetentionConfig.of(c.retention) if c.retention else None,
            tags=list(c.tags),
            streamState=info.state.value,
            currentEpoch=info.current_epoch,
            creationTime=info.creation_time_ms,
        )


class StreamsList(BaseModel):
    streams: list[StreamProperty]


class StreamStateBody(_Body):
    streamState: Literal["SEALED"]


# -- segments, epochs, workflows ---------------------------------------------------------


class Segment(BaseModel):
    id: int
    number: int
    epoch: int
    keyStart: float
    keyEnd: float
    creationTime: int

    @classmethod
    def of(cls, s: SegmentRecord) -> Segment:
        return cls(
            id=s.id,
            number=s.number,
            epoch=s.epoch,
            keyStart=s.key_start,
            keyEnd=s.key_end,
            creationTime=s.creation_time_ms,
        )


class SegmentsList(BaseModel):
    segments: list[Segment]


class Successor(BaseModel):
    segment: Segment
    predecessors: list[int]


class SuccessorsList(BaseModel):
    successors: list[Successor]


class ScaleMetadata(BaseModel):
    """One epoch: when it began and its segments."""

    epoch: int
    timestamp: int
    segmentList: list[Segment]

    @classmethod
    def of(cls, e: EpochRecord) -> ScaleMetadata:
        return cls(
            epoch=e.epoch,
            timestamp=e.creation_time_ms,
            segmentList=[Segment.of(s) for s in e.segments],
        )


class ScalingEventList(BaseModel):
    scalingEvents: list[ScaleMetadata]


class ScaleRequest(_Body):
    sealedSegments: Annotated[list[SegmentId], Field(min_length=1, max_length=LIST_ITEMS_MAX)]
    newKeyRanges: Annotated[list[tuple[Key, Key]], Field(min_length=1, max_length=LIST_ITEMS_MAX)]

    @model_validator(mode="after")
    def _ranges_ordered(self) -> ScaleRequest:
        for start, end in self.newKeyRanges:
            if not start < end:
                raise ValueError(f"key range [{start}, {end}) is empty")
        return self


class StreamCutBody(BaseModel):
    """A StreamCut: segment id (as a JSON object key) -> offset within that segment."""

    streamCut: dict[str, int]


class TruncateRequest(_Body):
    streamCut: Annotated[dict[SegmentIdKey, Offset], Field(min_length=1, max_length=LIST_ITEMS_MAX)]
