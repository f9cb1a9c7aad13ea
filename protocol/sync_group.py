"""SyncGroup request bodies (v0-v5) decoded without copying their assignments.

kafka-python's generated decoder copies every member's assignment into a new ``bytes``
while the request frame is still held, uncounted by the node-wide request budget
(``queued.max.request.bytes``): 8 SyncGroups of 50 MiB took the node past that budget.
Here each ``assignment`` is a ``memoryview`` slice of the frame; the coordinator copies
the assignments only once they are known to be within ``group_metadata_bytes_max`` and
the sender is the group's leader (``gateway/groups/membership.py``).

Layout (Kafka's ``SyncGroupRequest.json``): ``group_id`` string, ``generation_id`` int32,
``member_id`` string, ``group_instance_id`` nullable string (v3+), ``protocol_type`` and
``protocol_name`` nullable strings (v5+), assignments (each a member id and assignment
bytes). Versions 4+ are flexible (compact lengths, tagged fields after each struct and
the body).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import SyncGroupRequest
from tidegate.protocol.errors import KafkaProtocolError
from tidegate.protocol.nulls import invalid_field
from tidegate.protocol.reader import I32, Reader

MAX_VERSION = 5
FIRST_FLEXIBLE = 4

_Assignment = SyncGroupRequest.SyncGroupRequestAssignment


def decode_sync_group_request(frame: memoryview, body_offset: int, version: int) -> Any:
    """A ``SyncGroupRequest`` of ``version`` from the body at ``body_offset`` in
    ``frame``, its assignments slices of ``frame``. Raises ``KafkaProtocolError`` if it
    does not parse or has a null where the schema allows none (bytes after it are
    ignored, as kafka-python's decoder ignores them)."""
    if not 0 <= version <= MAX_VERSION:
        raise KafkaProtocolError(f"sync group request v{version} not decoded here")
    flexible = version >= FIRST_FLEXIBLE
    r = Reader(frame, "sync group request", body_offset)
    group_id = r.string(flexible)
    (generation_id,) = r.unpack(I32)
    member_id = r.string(flexible)
    group_instance_id = r.string(flexible) if version >= 3 else None
    protocol_type = r.string(flexible) if version >= 5 else None
    protocol_name = r.string(flexible) if version >= 5 else None
    n = r.length(flexible, wide=True)
    if n < -1:
        raise KafkaProtocolError(f"sync group request: array length {n}")
    items = []
    for _ in range(max(n, 0)):
        assigned = r.string(flexible)
        assignment = r.bytes_view(flexible)
        if flexible:
            r.skip_tags()
        items.append(_Assignment(member_id=assigned, assignment=assignment))
    assignments = None if n == -1 else items  # a null array is named by invalid_field below
    if flexible:
        r.skip_tags()
    request = SyncGroupRequest(
        group_id=group_id, generation_id=generation_id, member_id=member_id,
        group_instance_id=group_instance_id, protocol_type=protocol_type,
        protocol_name=protocol_name, assignments=assignments,
    )
    wrong = invalid_field(SyncGroupRequest._struct, request, version)
    if wrong is not None:
        raise KafkaProtocolError(f"bad SyncGroup v{version} body: {wrong}")
    return request
