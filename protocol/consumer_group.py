"""The KIP-848 consumer group APIs kafka-python 3.0.12 has no classes for:
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), built by kafka-python's own
schema machinery from the JSON specs in ``protocol/schemas/`` (same codec, same object
model as every other API)."""

from __future__ import annotations

import types
import warnings
from typing import Any

from kafka.protocol.api_message import ApiMessage
from tidegate.protocol import schemas


def _message(name: str) -> Any:
    """The message class ``name``, from ``protocol/schemas/<name>.json``."""
    with warnings.catch_warnings():
        # kafka-python reads schemas with importlib.resources.read_text (deprecated in 3.11).
        warnings.simplefilter("ignore", DeprecationWarning)
        return types.new_class(name, (ApiMessage,), {"load_json": schemas})


ConsumerGroupHeartbeatRequest = _message("ConsumerGroupHeartbeatRequest")
ConsumerGroupHeartbeatResponse = _message("ConsumerGroupHeartbeatResponse")
ConsumerGroupDescribeRequest = _message("ConsumerGroupDescribeRequest")
ConsumerGroupDescribeResponse = _message("ConsumerGroupDescribeResponse")

__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
]
