"""FindCoordinator (key 10): this node coordinates every group and every transactional
id it is asked about; in cluster mode one node does, the owner of the container of the
groups' table, because a coordinator keeps its groups' live state in memory.
v4+ batches keys; share-group keys (type 2) are not served."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(FindCoordinatorRequest, FindCoordinatorResponse, 0, 5)

#: Key types: 0 group, 1 transaction.
_SERVED_KEY_TYPES = (0, 1)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    host, port = req.session.advertised if req.session else ctx.config.advertised_address
    node = ctx.config.node_id
    key_type = request.key_type if req.api_version >= 1 else 0
    error = ErrorCode.NONE if key_type in _SERVED_KEY_TYPES else ErrorCode.INVALID_REQUEST
    message = None if error == ErrorCode.NONE else f"key type {key_type} is not served"
    cluster = ctx.cluster
    if cluster is not None and error == ErrorCode.NONE:
        # Cluster mode: the owner of the groups' table container (gateway/cluster/groups.py).
        found = cluster.group_coordinator(req.session.listener.name if req.session else None)
        if found is None:
            error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is moving"
        else:
            node, (host, port) = found
    if req.api_version < 4:
        ok = error == ErrorCode.NONE
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=error, error_message=message,
            node_id=node if ok else -1, host=host if ok else "", port=port if ok else -1,
        )
    coordinators = [
        FindCoordinatorResponse.Coordinator(
            key=key, node_id=node if error == ErrorCode.NONE else -1,
            host=host if error == ErrorCode.NONE else "",
            port=port if error == ErrorCode.NONE else -1,
            error_code=error, error_message=message,
        )
        for key in request.coordinator_keys
    ]
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
