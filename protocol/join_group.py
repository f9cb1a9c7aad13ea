"""JoinGroup request bodies (v0-v9) decoded without copying their protocol metadata.

kafka-python's generated decoder copies every protocol's metadata into a new ``bytes``
while the request frame is still held: a JoinGroup with large metadata held twice its
size while being decoded, and the node-wide request budget (``queued.max.request.bytes``)
counts only the frame. Here each protocol's ``metadata`` is a ``memoryview`` slice of the
frame, so the frame, charged to the budget until the request is answered, is all the
request holds; the handler copies the metadata only once it is known to be within
``member_metadata_bytes_max``.

Layout (Kafka's ``JoinGroupRequest.json``): ``group_id`` string, ``session_timeout_ms``
int32, ``rebalance_timeout_ms`` int32 (v1+), ``member_id`` string, ``group_instance_id``
nullable string (v5+), ``protocol_type`` string, protocols (each a name and metadata
bytes), ``reason`` nullable string (v8+). Versions 6+ are flexible (compact lengths,
tagged fields after each struct and the body).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import JoinGroupRequest
from tidegate.protocol.errors import KafkaProtocolError
from tidegate.protocol.nulls import invalid_field
from tidegate.protocol.reader import I32, Reader

MAX_VERSION = 9
FIRST_FLEXIBLE = 6

_Protocol = JoinGroupRequest.JoinGroupRequestProtocol


def decode_join_group_request(frame: memoryview, body_offset: int, version: int) -> Any:
    """A ``JoinGroupRequest`` of ``version`` from the body at ``body_offset`` in
    ``frame``, its metadata slices of ``frame``. Raises ``KafkaProtocolError`` if it
    does not parse or has a null where the schema allows none (bytes after it are
    ignored, as kafka-python's decoder ignores them)."""
    if not 0 <= version <= MAX_VERSION:
        raise KafkaProtocolError(f"join group request v{version} not decoded here")
    flexible = version >= FIRST_FLEXIBLE
    r = Reader(frame, "join group request", body_offset)
    group_id = r.string(flexible)
    (session_timeout_ms,) = r.unpack(I32)
    rebalance_timeout_ms = r.unpack(I32)[0] if version >= 1 else -1
    member_id = r.string(flexible)
    group_instance_id = r.string(flexible) if version >= 5 else None
    protocol_type = r.string(flexible)
    n = r.length(flexible, wide=True)
    if n < -1:
        raise KafkaProtocolError(f"join group request: array length {n}")
    items = []
    for _ in range(max(n, 0)):
        name = r.string(flexible)
        metadata = r.bytes_view(flexible)
        if flexible:
            r.skip_tags()
        items.append(_Protocol(name=name, metadata=metadata))
    protocols = None if n == -1 else items  # a null array is named by invalid_field below
    reason = r.string(flexible) if version >= 8 else None
    if flexible:
        r.skip_tags()
    request = JoinGroupRequest(
        group_id=group_id, session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms, member_id=member_id,
        group_instance_id=group_instance_id, protocol_type=protocol_type,
        protocols=protocols, reason=reason,
    )
    wrong = invalid_field(JoinGroupRequest._struct, request, version)
    if wrong is not None:
        raise KafkaProtocolError(f"bad JoinGroup v{version} body: {wrong}")
    return request
