"""Which operation on which resource each Kafka API needs (Kafka's "Operations and
Resources on Protocols"), checked in one place: ``guarded`` answers a request whose
request-wide resource (transactional id, the group of an offset commit, the cluster) is
denied with the API's authorization error without running its handler; the topics,
groups and config resources a request lists are checked one by one
(``gateway.security.item_acls``): the handler serves the allowed ones and the denied
ones are answered with their own error, as Kafka does.

To add an API: one ``RULES`` entry of request-wide ``Check``s (``_names`` helpers pull
resource names out of the decoded request), an ``item_acls.ITEMS`` entry if it lists
items; a ``DENIALS`` builder if its request-wide refusal needs more than the generic
answer (top-level ``error_code`` and each item answered with it). An API missing from
``RULES`` needs CLUSTER_ACTION on the cluster, as Kafka's unknown APIs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.consumer import (
    OffsetFetchResponse,
)
from tidegate.gateway.security import item_acls
from tidegate.gateway.security.acls import CLUSTER_NAME, Operation, ResourceType
from tidegate.gateway.security.session import Session
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.produce import PartitionProduceResult, encode_produce_response

#: A topic id's name (Fetch v13+ and others name topics by id), or None.
NameOf = Callable[[Any], "str | None"]
Names = Callable[[Any, int, NameOf], Iterable[str]]

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class Decider(Protocol):
    def allowed(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool: ...


@dataclass(frozen=True, slots=True)
class Check:
    operation: Operation
    resource_type: ResourceType
    names: Names
    error: ErrorCode
    #: Also allowed by the same operation on the cluster (CreateTopics' CREATE).
    or_cluster: bool = False


def _field(*path: str) -> Names:
    """Names at ``path`` of the request: ``_field("topics", "name")``. An empty name is
    a name like any other (checked, never skipped); a field the version does not carry
    (decoded as its default) names nothing."""

    def names(request: Any, version: int, name_of: NameOf) -> Iterable[str]:
        spec = getattr(type(request), "fields", {}).get(path[0])
        if spec is not None and not spec.for_version_q(version):
            return ()
        items: list[Any] = [request]
        for attr in path:
            nxt: list[Any] = []
            for item in items:
                value = getattr(item, attr, None)
                if isinstance(value, list):
                    nxt.extend(value)
                elif value is not None:
                    nxt.append(value)
            items = nxt
        return [str(i) for i in items]

    return names


def _cluster(request: Any, version: int, name_of: NameOf) -> Iterable[str]:
    return (CLUSTER_NAME,)


def _group_keys(key_type: int) -> Names:
    def names(request: Any, version: int, name_of: NameOf) -> Iterable[str]:
        if (getattr(request, "key_type", 0) or 0) != key_type:
            return ()
        keys = list(getattr(request, "coordinator_keys", None) or [])
        return keys or [request.key]

    return names


def _offset_fetch_groups(request: Any, version: int, name_of: NameOf = lambda _: None
                         ) -> Iterable[str]:
    groups = [g.group_id for g in (getattr(request, "groups", None) or [])]
    return groups or [request.group_id]


T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
Op = Operation

RULES: dict[int, tuple[Check, ...]] = {
    # Produce's and Fetch's topics are checked in their handlers (``item_acls.refusal``),
    # the items of the APIs in ``item_acls.ITEMS`` one by one.
    0: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),),
    1: (),
    2: (),
    # 3 Metadata: ``guarded_metadata`` filters what it lists.
    8: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    # v8+ names several groups: each is checked in ``item_acls``.
    9: (Check(Op.DESCRIBE, G, _field("group_id"), GROUP_DENIED),),
    10: (Check(Op.DESCRIBE, G, _group_keys(0), GROUP_DENIED),
         Check(Op.DESCRIBE, X, _group_keys(1), TXN_DENIED)),
    11: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    12: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    13: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    14: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    15: (),
    # ListGroups and ListTransactions list what the principal may DESCRIBE.
    16: (),
    17: (),
    18: (),
    19: (),
    20: (),
    21: (),
    # Idempotence without a transactional id needs no more than Produce's WRITE (KIP-679).
    22: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),),
    23: (),
    24: (Check(Op.WRITE, X, _field("v3_and_below_transactional_id"), TXN_DENIED),
         Check(Op.WRITE, T, _field("v3_and_below_topics", "name"), TOPIC_DENIED),
         Check(Op.CLUSTER_ACTION, C, lambda r, v, n: (CLUSTER_NAME,) if v >= 4 else (),
               CLUSTER_DENIED)),
    25: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),
         Check(Op.READ, G, _field("group_id"), GROUP_DENIED)),
    26: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),),
    27: (Check(Op.CLUSTER_ACTION, C, _cluster, CLUSTER_DENIED),),
    28: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),
         Check(Op.READ, G, _field("group_id"), GROUP_DENIED)),
    29: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    30: (Check(Op.ALTER, C, _cluster, CLUSTER_DENIED),),
    31: (Check(Op.ALTER, C, _cluster, CLUSTER_DENIED),),
    32: (),
    33: (),
    35: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    36: (),
    37: (),
    42: (),
    44: (),
    46: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    48: (Check(Op.DESCRIBE_CONFIGS, C, _cluster, CLUSTER_DENIED),),
    47: (Check(Op.DELETE, G, _field("group_id"), GROUP_DENIED),),
    50: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    51: (Check(Op.ALTER, C, _cluster, CLUSTER_DENIED),),
    60: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    61: (),
    65: (),
    66: (),
    # KIP-848: the heartbeat READs the group (and subscribes to topics it may DESCRIBE).
    68: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),
         Check(Op.DESCRIBE, T, _field("subscribed_topic_names"), TOPIC_DENIED)),
    69: (),
    # Share groups (KIP-932): each handler checks the group (READ; DESCRIBE to describe;
    # DELETE for DeleteShareGroupOffsets) and the topics it reads or lists.
    76: (),
    77: (),
    78: (),
    79: (),
    90: (),
    91: (),
    92: (),
}

#: Kafka's rule for an API this table does not know: the cluster's CLUSTER_ACTION.
UNKNOWN_API = (Check(Op.CLUSTER_ACTION, C, _cluster, CLUSTER_DENIED),)


def denied(decider: Decider, session: Session, request: Any, api_key: int, version: int,
           name_of: NameOf = lambda _: None) -> tuple[ErrorCode, str] | None:
    """The first check that fails: its error and a message naming the resource."""
    principal, host = session.principal, session.client_host
    for check in RULES.get(api_key, UNKNOWN_API):
        for name in check.names(request, version, name_of):
            if decider.allowed(principal, host, check.operation, check.resource_type, name):
                continue
            if check.or_cluster and decider.allowed(
                principal, host, check.operation, C, CLUSTER_NAME
            ):
                continue
            kind = check.resource_type.name.lower().replace("_", " ")
            return check.error, (
                f"{principal} may not {check.operation.name} {kind} {name!r}"
            )
    return None


Handler = Callable[[], Awaitable[Any]]


async def guarded(
    decider: Decider, session: Session, spec: ApiSpec, request: Any, version: int,
    handle: Handler, name_of: NameOf = lambda _: None,
) -> Any:
    key = spec.api_key
    refused = denied(decider, session, request, key, version, name_of)
    if refused is not None:
        error, message = refused
        if key == 24 and error == TOPIC_DENIED:
            return _add_partitions(request, lambda t: not decider.allowed(
                session.principal, session.client_host, Op.WRITE, T, t))
        return refusal(spec, request, version, error, message)
    taken = item_acls.split(decider, session, request, key, version, name_of)
    response = await handle()
    if response is None:
        return None
    if taken is not None:
        response = item_acls.merge(response, taken)
    screen = item_acls.FILTERS.get(key)
    if screen is not None:
        screen(decider, session, request, response)
    return response


def refusal(spec: ApiSpec, request: Any, version: int, error: ErrorCode, message: str) -> Any:
    """The answer to ``request`` refused whole with ``error`` (every item answered with it)."""
    build = DENIALS.get(spec.api_key)
    if build is not None:
        return build(request, version, error, message)
    return _generic(spec, request, version, error, message)


def _generic(spec: ApiSpec, request: Any, version: int, error: ErrorCode, message: str) -> Any:
    """The top-level error, and each item of an API with items answered with it."""
    fields = set(spec.response_class.fields)
    values: dict[str, Any] = {}
    if "error_code" in fields:
        values["error_code"] = error
    if "error_message" in fields:
        values["error_message"] = message
    items = item_acls.ITEMS.get(spec.api_key)
    if items is not None:
        asked = getattr(request, items.field(version), None) or ()
        values[items.answers] = [items.answer(item, error, message) for item in asked]
    return spec.response_class(**values)


Denial = Callable[[Any, int, ErrorCode, str], Any]


def _produce(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    from tidegate.gateway.handlers import EncodedBody

    topics = [
        (t.name, [PartitionProduceResult(p.index, error, -1, -1, message)
                  for p in t.partition_data])
        for t in request.topic_data
    ]
    if request.acks == 0:
        return None
    return EncodedBody([encode_produce_response(version, topics)])


def _offset_fetch(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    groups = [
        OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g, topics=[], error_code=error)
        for g in _offset_fetch_groups(request, version)
    ]
    return OffsetFetchResponse(throttle_time_ms=0, topics=[], error_code=error, groups=groups)


def _add_partitions(request: Any, refused: Callable[[str], bool]) -> Any:
    """Kafka adds none of the partitions when a topic is denied: the denied topics'
    answer TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED (v3 and below;
    v4+ brokers' batches need CLUSTER_ACTION, refused whole)."""
    from kafka.protocol.producer import AddPartitionsToTxnResponse as R

    R3 = R.AddPartitionsToTxnTopicResult
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=[],
             results_by_topic_v3_and_below=[
        R3(name=t.name, results_by_partition=[R3.AddPartitionsToTxnPartitionResult(
            partition_index=p,
            partition_error_code=TOPIC_DENIED if refused(t.name) else ErrorCode.OPERATION_NOT_ATTEMPTED,
        ) for p in t.partitions]) for t in request.v3_and_below_topics])


def _add_partitions_denied(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    """v0-3 carry no top-level error: each partition answers it, as Kafka's
    ``getErrorResponse``; v4+ refuse the batch with the top-level error."""
    from kafka.protocol.producer import AddPartitionsToTxnResponse as R

    if version >= 4:
        return R(throttle_time_ms=0, error_code=error, results_by_transaction=[],
                 results_by_topic_v3_and_below=[])
    R3 = R.AddPartitionsToTxnTopicResult
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=[],
             results_by_topic_v3_and_below=[
        R3(name=t.name, results_by_partition=[R3.AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=error) for p in t.partitions])
        for t in request.v3_and_below_topics])


def _describe_log_dirs(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    """Before v3 there is no top-level error: one log dir result carries it (an empty
    answer would read as a broker without log dirs)."""
    from kafka.protocol.admin import DescribeLogDirsResponse as R

    if version >= 3:
        return R(throttle_time_ms=0, error_code=error, results=[])
    return R(throttle_time_ms=0, error_code=error, results=[R.DescribeLogDirsResult(
        error_code=error, log_dir="", topics=[], total_bytes=-1, usable_bytes=-1,
        is_cordoned=False)])


def _write_txn_markers(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    """Every partition of every marker answers the error, as Kafka's."""
    from kafka.protocol.producer import WriteTxnMarkersResponse as R

    M = R.WritableTxnMarkerResult
    return R(markers=[M(producer_id=m.producer_id, topics=[
        M.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            M.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult(
                partition_index=p, error_code=error) for p in t.partition_indexes])
        for t in m.topics]) for m in request.markers])


def _create_acls(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    from kafka.protocol.admin import CreateAclsResponse

    R = CreateAclsResponse.AclCreationResult
    return CreateAclsResponse(throttle_time_ms=0, results=[
        R(error_code=error, error_message=message) for _ in request.creations
    ])


def _delete_acls(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    from kafka.protocol.admin import DeleteAclsResponse

    R = DeleteAclsResponse.DeleteAclsFilterResult
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        R(error_code=error, error_message=message, matching_acls=[]) for _ in request.filters
    ])


def _alter_scram(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    from kafka.protocol.admin import AlterUserScramCredentialsResponse

    R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        R(user=n, error_code=error, error_message=message) for n in dict.fromkeys(names)
    ])


def _find_coordinator(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    from kafka.protocol.metadata import FindCoordinatorResponse as R

    keys = list(getattr(request, "coordinator_keys", None) or []) if version >= 4 else []
    return R(
        throttle_time_ms=0, error_code=error, error_message=message, node_id=-1, host="",
        port=-1, coordinators=[
            R.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=error,
                          error_message=message) for k in keys
        ],
    )


DENIALS: dict[int, Denial] = {
    10: _find_coordinator, 24: _add_partitions_denied, 35: _describe_log_dirs,
    0: _produce, 9: _offset_fetch, 27: _write_txn_markers, 30: _create_acls, 31: _delete_acls, 51: _alter_scram,
}


async def guarded_metadata(
    decider: Decider, session: Session, request: Any, handle: Handler
) -> Any:
    """Metadata lists only the topics the principal may DESCRIBE; a named topic it may
    not is answered TOPIC_AUTHORIZATION_FAILED, and is auto-created only with CREATE."""
    from kafka.protocol.metadata import MetadataResponse

    principal, host = session.principal, session.client_host

    def may(operation: Operation, name: str) -> bool:
        return decider.allowed(principal, host, operation, T, name)

    refused: list[str] = []
    if request.topics:
        kept = []
        for topic in request.topics:
            name = topic.name
            if name is not None and not may(Op.DESCRIBE, name):
                refused.append(name)
            else:
                kept.append(topic)
        request.topics = kept
        may_create_all = decider.allowed(principal, host, Op.CREATE, C, CLUSTER_NAME)
        if not may_create_all and not all(may(Op.CREATE, t.name) for t in kept if t.name):
            request.allow_auto_topic_creation = False
    response = await handle()
    response.topics = [t for t in response.topics if t.name is None or may(Op.DESCRIBE, t.name)]
    for name in refused:
        response.topics.append(MetadataResponse.MetadataResponseTopic(
            error_code=TOPIC_DENIED, name=name, is_internal=False, partitions=[],
        ))
    return response
