"""Authorized operations, as Kafka's AuthHelper.authorizedOperations answers them in
Metadata, DescribeCluster, DescribeGroups and ConsumerGroupDescribe when a client asks
(``include_*_authorized_operations``): the operations Kafka supports on the resource type
that the principal may do; all of them without an authorizer; Int.MinValue when not asked.
"""

from __future__ import annotations

from tidegate.gateway.security.acls import CLUSTER_NAME, Operation, ResourceType
from tidegate.gateway.security.item_acls import HasAuthorizer, refusal
from tidegate.gateway.security.session import Session

Op = Operation
#: Kafka's AclEntry.supportedOperations per resource type.
SUPPORTED: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}
#: Kafka's "not requested" value of an authorized-operations field.
NOT_REQUESTED = -(2**31)


def authorized(security: HasAuthorizer | None, session: Session | None,
               resource_type: ResourceType, name: str = CLUSTER_NAME) -> set[int]:
    """The codes of the operations the connection's principal may do on the resource."""
    return {
        int(op) for op in SUPPORTED[resource_type]
        if refusal(security, session, op, resource_type, name) is None
    }


def as_bits(operations: set[int]) -> int:
    """The int32 bit field of the wire (bit N: operation code N), for schemas whose codec
    takes the number itself."""
    return sum(1 << op for op in operations)
