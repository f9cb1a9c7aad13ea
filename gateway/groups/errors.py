"""Error codes the group coordinator answers with.

Most come from ``protocol.errors.ErrorCode``; the four below are Kafka's numbers for
codes that module does not list.
"""

from __future__ import annotations

from tidegate.protocol.errors import ErrorCode

OFFSET_METADATA_TOO_LARGE = 12
NON_EMPTY_GROUP = 68
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_REGULAR_EXPRESSION = 128

__all__ = [
    "ErrorCode",
    "GROUP_SUBSCRIBED_TO_TOPIC",
    "INVALID_REGULAR_EXPRESSION",
    "NON_EMPTY_GROUP",
    "OFFSET_METADATA_TOO_LARGE",
]
