"""DescribeCluster (key 60): this node is the one broker and the controller; in cluster
mode every live node on the client's listener and the controller leader. Authorized
operations where the client asks for them."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.acls import ResourceType
from tidegate.gateway.security.operations import authorized
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeClusterRequest, DescribeClusterResponse, 0, 2)

#: Kafka's UNSUPPORTED_ENDPOINT_TYPE (v1+ ``endpoint_type`` 2, controllers: none are
#: exposed to clients here).
UNSUPPORTED_ENDPOINT_TYPE = 119
_BROKERS = 1
#: Quirk: kafka-python patches this field into a bit set; None encodes Kafka's
#: Int.MinValue, "authorized operations not requested or not known".
_AUTHORIZED_OPERATIONS_UNKNOWN = None


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    endpoint_type = request.endpoint_type if req.api_version >= 1 else _BROKERS
    node = ctx.config.node_id
    if endpoint_type != _BROKERS:
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"endpoint type {endpoint_type} is not supported",
            endpoint_type=endpoint_type, cluster_id=ctx.config.cluster_id, controller_id=-1,
            brokers=[], authorized_operations=_AUTHORIZED_OPERATIONS_UNKNOWN,
        )
    host, port = req.session.advertised if req.session else ctx.config.advertised_address
    found = [(node, host, port)]
    controller = node
    if ctx.cluster is not None:  # every node's address on the client's listener
        found = ctx.cluster.brokers(req.session.listener.name if req.session else None)
        controller = ctx.cluster.controller_id()
    brokers = [
        DescribeClusterResponse.DescribeClusterBroker(
            broker_id=n, host=h, port=p, rack=None, is_fenced=False)
        for n, h, p in found
    ]
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        endpoint_type=_BROKERS, cluster_id=ctx.config.cluster_id, controller_id=controller,
        brokers=brokers, authorized_operations=(
            authorized(ctx.security, req.session, ResourceType.CLUSTER)
            if request.include_cluster_authorized_operations else _AUTHORIZED_OPERATIONS_UNKNOWN
        ),
    )
