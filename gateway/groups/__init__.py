"""Kafka's classic consumer-group protocol: the group coordinator and its durable state.

``GroupCoordinator`` (``coordinator.py``) is the one object the gateway's handlers
call; its state machine lives in ``model.py`` and ``membership.py``, its storage (one
table segment) in ``store.py``.
"""

from tidegate.gateway.groups.config import GroupConfig
from tidegate.gateway.groups.coordinator import (
    GroupCoordinator,
    GroupDescription,
    MemberDescription,
    OffsetCommit,
)
from tidegate.gateway.groups.membership import JoinRequest
from tidegate.gateway.groups.model import CommittedOffset, GroupState, JoinResult, SyncResult

__all__ = [
    "CommittedOffset",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "MemberDescription",
    "OffsetCommit",
    "SyncResult",
]
