"""Which operation on which resource each Kafka API needs (Kafka's "Operations and
Resources on Protocols"), checked in one place: ``guarded`` runs a request's handler
only when every resource it names is allowed, else answers the API's authorization
error without running it.

To add an API: one ``RULES`` entry of ``Check``s (``_names`` helpers pull resource names
out of the decoded request); an API with per-topic or per-group entries in its response
also gets a ``DENIALS`` builder, others get the generic top-level ``error_code``. An API
missing from ``RULES`` needs CLUSTER_ACTION on the cluster, as Kafka's unknown APIs.
Known simplification: a request naming several resources, one of them denied, is
refused as a whole (Kafka serves the allowed part).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.admin import (
    CreateTopicsResponse,
    DeleteGroupsResponse,
    DeleteTopicsResponse,
    DescribeGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchResponse,
    ListOffsetsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
)
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
    """Names at ``path`` of the request: ``_field("topics", "name")``."""

    def names(request: Any, version: int, name_of: NameOf) -> Iterable[str]:
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
        return [str(i) for i in items if i != ""]

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


def _config_resources(kind: int) -> Names:
    def names(request: Any, version: int, name_of: NameOf) -> Iterable[str]:
        found = [r.resource_name for r in request.resources if r.resource_type == kind]
        return found if kind == 2 else (CLUSTER_NAME,) * bool(found)

    return names


def _offset_fetch_groups(request: Any, version: int, name_of: NameOf = lambda _: None
                         ) -> Iterable[str]:
    groups = [g.group_id for g in (getattr(request, "groups", None) or [])]
    return groups or [request.group_id]


def _delete_topic_names(request: Any, version: int, name_of: NameOf = lambda _: None
                        ) -> Iterable[str]:
    """Topics named by id only are checked under their name (or, unknown, the id)."""
    names = list(getattr(request, "topic_names", None) or [])
    return names + [t.name or name_of(t.topic_id) or str(t.topic_id)
                    for t in (getattr(request, "topics", None) or [])]


def _fetch_topics(request: Any, version: int, name_of: NameOf) -> Iterable[str]:
    """Fetch v13+ names topics by id: checked under the id's topic (an unknown id under
    the id itself, which no ACL names)."""
    return [t.topic or name_of(t.topic_id) or str(t.topic_id) for t in request.topics]


T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
Op = Operation

RULES: dict[int, tuple[Check, ...]] = {
    0: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),
        Check(Op.WRITE, T, _field("topic_data", "name"), TOPIC_DENIED)),
    1: (Check(Op.READ, T, _fetch_topics, TOPIC_DENIED),),
    2: (Check(Op.DESCRIBE, T, _field("topics", "name"), TOPIC_DENIED),),
    # 3 Metadata: ``_metadata`` filters what it lists.
    8: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),
        Check(Op.READ, T, _field("topics", "name"), TOPIC_DENIED)),
    9: (Check(Op.DESCRIBE, G, _offset_fetch_groups, GROUP_DENIED),),
    10: (Check(Op.DESCRIBE, G, _group_keys(0), GROUP_DENIED),
         Check(Op.DESCRIBE, X, _group_keys(1), TXN_DENIED)),
    11: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    12: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    13: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    14: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),),
    15: (Check(Op.DESCRIBE, G, _field("groups"), GROUP_DENIED),),
    16: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    17: (),
    18: (),
    19: (Check(Op.CREATE, T, _field("topics", "name"), TOPIC_DENIED, or_cluster=True),),
    20: (Check(Op.DELETE, T, _delete_topic_names, TOPIC_DENIED),),
    21: (Check(Op.DELETE, T, _field("topics", "name"), TOPIC_DENIED),),
    # Idempotence without a transactional id needs no more than Produce's WRITE (KIP-679).
    22: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),),
    23: (Check(Op.DESCRIBE, T, _field("topics", "topic"), TOPIC_DENIED),),
    24: (Check(Op.WRITE, X, _field("v3_and_below_transactional_id"), TXN_DENIED),
         Check(Op.WRITE, T, _field("v3_and_below_topics", "name"), TOPIC_DENIED),
         Check(Op.CLUSTER_ACTION, C, lambda r, v, n: (CLUSTER_NAME,) if v >= 4 else (),
               CLUSTER_DENIED)),
    25: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),
         Check(Op.READ, G, _field("group_id"), GROUP_DENIED)),
    26: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),),
    27: (Check(Op.CLUSTER_ACTION, C, _cluster, CLUSTER_DENIED),),
    28: (Check(Op.WRITE, X, _field("transactional_id"), TXN_DENIED),
         Check(Op.READ, G, _field("group_id"), GROUP_DENIED),
         Check(Op.READ, T, _field("topics", "name"), TOPIC_DENIED)),
    29: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    30: (Check(Op.ALTER, C, _cluster, CLUSTER_DENIED),),
    31: (Check(Op.ALTER, C, _cluster, CLUSTER_DENIED),),
    32: (Check(Op.DESCRIBE_CONFIGS, T, _config_resources(2), TOPIC_DENIED),
         Check(Op.DESCRIBE_CONFIGS, C, _config_resources(4), CLUSTER_DENIED)),
    33: (Check(Op.ALTER_CONFIGS, T, _config_resources(2), TOPIC_DENIED),
         Check(Op.ALTER_CONFIGS, C, _config_resources(4), CLUSTER_DENIED)),
    35: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    36: (),
    37: (Check(Op.ALTER, T, _field("topics", "name"), TOPIC_DENIED),),
    42: (Check(Op.DELETE, G, _field("groups_names"), GROUP_DENIED),),
    44: (Check(Op.ALTER_CONFIGS, T, _config_resources(2), TOPIC_DENIED),
         Check(Op.ALTER_CONFIGS, C, _config_resources(4), CLUSTER_DENIED)),
    46: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    48: (Check(Op.DESCRIBE_CONFIGS, C, _cluster, CLUSTER_DENIED),),
    47: (Check(Op.DELETE, G, _field("group_id"), GROUP_DENIED),
         Check(Op.READ, T, _field("topics", "name"), TOPIC_DENIED)),
    50: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    51: (Check(Op.ALTER, C, _cluster, CLUSTER_DENIED),),
    60: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    61: (Check(Op.READ, T, _field("topics", "name"), TOPIC_DENIED),),
    65: (Check(Op.DESCRIBE, X, _field("transactional_ids"), TXN_DENIED),),
    66: (Check(Op.DESCRIBE, C, _cluster, CLUSTER_DENIED),),
    # KIP-848: the heartbeat READs the group (and subscribes to topics it may DESCRIBE).
    68: (Check(Op.READ, G, _field("group_id"), GROUP_DENIED),
         Check(Op.DESCRIBE, T, _field("subscribed_topic_names"), TOPIC_DENIED)),
    69: (Check(Op.DESCRIBE, G, _field("group_ids"), GROUP_DENIED),),
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
    refusal = denied(decider, session, request, spec.api_key, version, name_of)
    if refusal is None:
        return await handle()
    error, message = refusal
    build = DENIALS.get(spec.api_key)
    if build is not None:
        return build(request, version, error, message)
    return _generic(spec, error, message)


def _generic(spec: ApiSpec, error: ErrorCode, message: str) -> Any:
    fields = set(spec.response_class.fields)
    values: dict[str, Any] = {}
    if "error_code" in fields:
        values["error_code"] = error
    if "error_message" in fields:
        values["error_message"] = message
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


def _fetch(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    R = FetchResponse
    return R(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        R.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
            R.FetchableTopicResponse.PartitionData(
                partition_index=p.partition, error_code=error, high_watermark=-1,
                last_stable_offset=-1, log_start_offset=-1, records=None,
            ) for p in t.partitions
        ]) for t in request.topics
    ])


def _list_offsets(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    R = ListOffsetsResponse.ListOffsetsTopicResponse
    return ListOffsetsResponse(throttle_time_ms=0, topics=[
        R(name=t.name, partitions=[
            R.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=error, timestamp=-1, offset=-1,
            ) for p in t.partitions
        ]) for t in request.topics
    ])


def _offset_commit(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    R = OffsetCommitResponse.OffsetCommitResponseTopic
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        R(name=t.name, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error)
            for p in t.partitions
        ]) for t in request.topics
    ])


def _offset_fetch(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    groups = [
        OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g, topics=[], error_code=error)
        for g in _offset_fetch_groups(request, version)
    ]
    return OffsetFetchResponse(throttle_time_ms=0, topics=[], error_code=error, groups=groups)


def _create_topics(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    R = CreateTopicsResponse.CreatableTopicResult
    return CreateTopicsResponse(throttle_time_ms=0, topics=[
        R(name=t.name, error_code=error, error_message=message, num_partitions=-1,
          replication_factor=-1, configs=None) for t in request.topics
    ])


def _delete_topics(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    R = DeleteTopicsResponse.DeletableTopicResult
    return DeleteTopicsResponse(throttle_time_ms=0, responses=[
        R(name=n, error_code=error, error_message=message)
        for n in _delete_topic_names(request, version)
    ])


def _describe_groups(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    R = DescribeGroupsResponse.DescribedGroup
    return DescribeGroupsResponse(throttle_time_ms=0, groups=[
        R(error_code=error, error_message=message, group_id=g, group_state="",
          protocol_type="", protocol_data="", members=[]) for g in request.groups
    ])


def _delete_groups(request: Any, version: int, error: ErrorCode, message: str) -> Any:
    R = DeleteGroupsResponse.DeletableGroupResult
    return DeleteGroupsResponse(
        throttle_time_ms=0, results=[R(group_id=g, error_code=error) for g in request.groups_names]
    )


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
    10: _find_coordinator,
    0: _produce, 1: _fetch, 2: _list_offsets, 8: _offset_commit, 9: _offset_fetch,
    19: _create_topics, 20: _delete_topics, 15: _describe_groups, 42: _delete_groups,
    30: _create_acls, 31: _delete_acls, 51: _alter_scram,
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
