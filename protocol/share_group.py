"""The KIP-932 share group APIs kafka-python 3.0.12 has no classes for:
ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78) and ShareAcknowledge
(79) and the offsets admin APIs (90-92), at the versions kafka-clients 4.3 sends, built from ``protocol/schemas/`` like
``protocol/consumer_group.py``."""

from __future__ import annotations

from tidegate.protocol.consumer_group import _message

ShareGroupHeartbeatRequest = _message("ShareGroupHeartbeatRequest")
ShareGroupHeartbeatResponse = _message("ShareGroupHeartbeatResponse")
ShareGroupDescribeRequest = _message("ShareGroupDescribeRequest")
ShareGroupDescribeResponse = _message("ShareGroupDescribeResponse")
ShareFetchRequest = _message("ShareFetchRequest")
ShareFetchResponse = _message("ShareFetchResponse")
ShareAcknowledgeRequest = _message("ShareAcknowledgeRequest")
ShareAcknowledgeResponse = _message("ShareAcknowledgeResponse")
DescribeShareGroupOffsetsRequest = _message("DescribeShareGroupOffsetsRequest")
DescribeShareGroupOffsetsResponse = _message("DescribeShareGroupOffsetsResponse")
AlterShareGroupOffsetsRequest = _message("AlterShareGroupOffsetsRequest")
AlterShareGroupOffsetsResponse = _message("AlterShareGroupOffsetsResponse")
DeleteShareGroupOffsetsRequest = _message("DeleteShareGroupOffsetsRequest")
DeleteShareGroupOffsetsResponse = _message("DeleteShareGroupOffsetsResponse")

__all__ = [
    "AlterShareGroupOffsetsRequest",
    "AlterShareGroupOffsetsResponse",
    "DeleteShareGroupOffsetsRequest",
    "DeleteShareGroupOffsetsResponse",
    "DescribeShareGroupOffsetsRequest",
    "DescribeShareGroupOffsetsResponse",
    "ShareAcknowledgeRequest",
    "ShareAcknowledgeResponse",
    "ShareFetchRequest",
    "ShareFetchResponse",
    "ShareGroupDescribeRequest",
    "ShareGroupDescribeResponse",
    "ShareGroupHeartbeatRequest",
    "ShareGroupHeartbeatResponse",
]
