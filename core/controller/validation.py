"""Checks on caller input; each failure is an ``InvalidArgumentError`` naming the
field."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tidegate.core.controller.api import (
    InvalidArgumentError,
    KeyRange,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    StreamConfig,
)
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.keyspace import check_cover

_NAME = re.compile(r"[A-Za-z0-9._-]+")

#: Scope names the controller keeps for itself.
RESERVED_SCOPES = frozenset({"_system"})


def check_name(kind: str, name: object, config: ControllerConfig) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidArgumentError(
            f"{kind} name {name!r} must be 1+ characters of A-Z a-z 0-9 . _ -"
        )
    if len(name) > config.name_length_max:
        raise InvalidArgumentError(f"{kind} name longer than {config.name_length_max}")
    return name


def _int(field: str, v: object, least: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise InvalidArgumentError(f"{field} must be an integer >= {least}, not {v!r}")


def check_config(c: StreamConfig, config: ControllerConfig) -> None:
    if not isinstance(c, StreamConfig):
        raise InvalidArgumentError("stream configuration expected")
    s = c.scaling
    if not isinstance(s, ScalingPolicy) or not isinstance(s.type, ScalingType):
        raise InvalidArgumentError("scaling policy expected")
    _int("minSegments", s.min_segments, 1)
    if s.min_segments > config.segments_per_request_max:
        raise InvalidArgumentError(f"minSegments above {config.segments_per_request_max}")
    if s.type == ScalingType.FIXED_NUM_SEGMENTS:
        _int("targetRate", s.target_rate, 0)
        _int("scaleFactor", s.scale_factor, 0)
    else:
        _int("targetRate", s.target_rate, 1)
        _int("scaleFactor", s.scale_factor, 1)
    r = c.retention
    if r is not None:
        if not isinstance(r, RetentionPolicy) or not isinstance(r.type, RetentionType):
            raise InvalidArgumentError("retention policy expected")
        _int("retention value", r.value, 1)
        if r.bytes_max is not None:
            if r.type != RetentionType.TIME:
                raise InvalidArgumentError("a size bound goes with a time retention policy")
            _int("retention bytes_max", r.bytes_max, 1)
    if not isinstance(c.tags, tuple):
        raise InvalidArgumentError("tags must be a tuple of strings")
    if len(c.tags) > config.tags_max:
        raise InvalidArgumentError(f"more than {config.tags_max} tags")
    if len(set(c.tags)) != len(c.tags):
        raise InvalidArgumentError("duplicate tags")
    for t in c.tags:
        if not isinstance(t, str) or not t or len(t) > config.tag_length_max or "/" in t:
            raise InvalidArgumentError(
                f"tag {t!r} must be 1..{config.tag_length_max} characters without '/'"
            )


def check_initial_ranges(ranges: Sequence[KeyRange], config: ControllerConfig) -> None:
    if len(ranges) > config.segments_per_request_max:
        raise InvalidArgumentError(f"more than {config.segments_per_request_max} key ranges")
    for r in ranges:
        if not isinstance(r, KeyRange):
            raise InvalidArgumentError(f"key range expected, not {r!r}")
    check_cover(ranges, "initial key ranges")
