"""Per-item authorization, as Kafka's KafkaApis does it: a request naming several topics,
groups, transactional ids or config resources is served for the allowed ones and
answers the denied ones with their own authorization error.

``split`` takes the denied items out of the request before its handler runs and
``merge`` adds their answers to the handler's response (``ITEMS``: where each API's
items are, what they need, how a denied one is answered). ``FILTERS`` drop from a
response what the principal may not see (ListGroups, ListTransactions, OffsetFetch of
all topics, DescribeTransactions' topics). Produce and Fetch ask ``refusal`` in their
handlers: Produce encodes its own answer, and a fetch session's cached partitions are
re-checked on every fetch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.admin import (
    AlterConfigsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.consumer import (
    ListOffsetsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.producer import TxnOffsetCommitResponse
from tidegate.gateway.security.acls import CLUSTER_NAME, Operation, ResourceType
from tidegate.gateway.security.session import Session
from tidegate.protocol.consumer_group import ConsumerGroupDescribeResponse
from tidegate.protocol.errors import ErrorCode

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
Op = Operation
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
NameOf = Callable[[Any], "str | None"]


class Decider(Protocol):
    def allowed(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool: ...


class HasAuthorizer(Protocol):
    @property
    def authorizer(self) -> Decider | None: ...


def message(session: Session, operation: int, resource_type: int, name: str) -> str:
    kind = ResourceType(resource_type).name.lower().replace("_", " ")
    return f"{session.principal} may not {Operation(operation).name} {kind} {name!r}"


def refusal(security: HasAuthorizer | None, session: Session | None, operation: int,
            resource_type: int, name: str) -> str | None:
    """Why the connection's principal may not do ``operation`` on the resource, or None
    (also with no authorizer configured)."""
    decider = security.authorizer if security is not None else None
    if decider is None or session is None:
        return None
    if decider.allowed(session.principal, session.client_host, operation, resource_type, name):
        return None
    return message(session, operation, resource_type, name)


#: The resource an item names, the error for it, and whether the operation on the
#: cluster also allows it (CreateTopics' CREATE); None: the item is not checked.
Resource = tuple[ResourceType, str, ErrorCode, bool] | None
Answer = Callable[[Any, ErrorCode, str], Any]


@dataclass(frozen=True, slots=True)
class Items:
    #: The request's list of items (by version: DeleteTopics v6 names topics by id).
    field: Callable[[int], str]
    operation: Operation
    resource: Callable[[Any, NameOf], Resource]
    #: The response's list the answers go in, and one denied item's answer.
    answers: str
    answer: Answer


def _topic(error: ErrorCode = TOPIC_DENIED, attr: str = "name") -> Callable[[Any, NameOf], Resource]:
    return lambda item, name_of: (T, str(getattr(item, attr)), error, False)


def _plain(resource_type: ResourceType, error: ErrorCode) -> Callable[[Any, NameOf], Resource]:
    return lambda item, name_of: (resource_type, str(item), error, False)


def _config(item: Any, name_of: NameOf) -> Resource:
    if item.resource_type == 2:
        return T, item.resource_name, TOPIC_DENIED, False
    if item.resource_type in (4, 8):  # broker, broker logger: the cluster's configs
        return C, CLUSTER_NAME, CLUSTER_DENIED, False
    if item.resource_type == 32:  # ConfigResource.Type.GROUP: the group's own ACLs
        return G, item.resource_name, GROUP_DENIED, False
    return None


def _deleted_topic(item: Any, name_of: NameOf) -> Resource:
    if isinstance(item, str):
        return T, item, TOPIC_DENIED, False
    # By id: checked under the id's topic (an unknown id under the id, which no ACL names).
    return T, item.name or name_of(item.topic_id) or str(item.topic_id), TOPIC_DENIED, False


def _same(name: str) -> Callable[[int], str]:
    return lambda version: name


#: Stands for the refusal's message in ``_per_partition``'s extra fields.
_MESSAGE = object()

def _per_partition(topic_cls: Any, part_cls: Any, name: str = "name", index: str = "partition_index",
                   asked: str = "partitions", asked_index: str = "partition_index",
                   error_field: str = "error_code", **extra: Any) -> Answer:
    """A denied topic's answer: each partition asked with the error."""

    def answer(item: Any, error: ErrorCode, message: str) -> Any:
        indexes = [p if isinstance(p, int) else getattr(p, asked_index)
                   for p in getattr(item, asked) or ()]
        values = {k: (message if v is _MESSAGE else v) for k, v in extra.items()}
        return topic_cls(**{name: getattr(item, name), "partitions": [
            part_cls(**{index: i, error_field: error}, **values) for i in indexes
        ]})

    return answer


_LO = ListOffsetsResponse.ListOffsetsTopicResponse
_OC = OffsetCommitResponse.OffsetCommitResponseTopic
_DR = DeleteRecordsResponse.DeleteRecordsTopicResult
_OE = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_TC = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_OD = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DP = DescribeProducersResponse.TopicResponse
_OFG = OffsetFetchResponse.OffsetFetchResponseGroup


def _config_answer(cls: Any) -> Answer:
    def answer(item: Any, error: ErrorCode, message: str) -> Any:
        return cls(error_code=error, error_message=message, resource_type=item.resource_type,
                   resource_name=item.resource_name, **({"configs": []} if cls is _DC else {}))

    return answer


_DC = DescribeConfigsResponse.DescribeConfigsResult


def _described_group(item: Any, error: ErrorCode, message: str) -> Any:
    return DescribeGroupsResponse.DescribedGroup(
        error_code=error, error_message=message, group_id=item, group_state="",
        protocol_type="", protocol_data="", members=[],
    )


def _consumer_group(item: Any, error: ErrorCode, message: str) -> Any:
    return ConsumerGroupDescribeResponse.DescribedGroup(
        error_code=error, error_message=message, group_id=item, group_state="", group_epoch=-1,
        assignment_epoch=-1, assignor_name="", members=[],
    )


ITEMS: dict[int, Items] = {
    2: Items(_same("topics"), Op.DESCRIBE, _topic(), "topics",
             _per_partition(_LO, _LO.ListOffsetsPartitionResponse, timestamp=-1, offset=-1)),
    8: Items(_same("topics"), Op.READ, _topic(), "topics",
             _per_partition(_OC, _OC.OffsetCommitResponsePartition)),
    9: Items(_same("groups"), Op.DESCRIBE, lambda g, n: (G, g.group_id, GROUP_DENIED, False), "groups",
             lambda g, e, m: _OFG(group_id=g.group_id, topics=[], error_code=e)),
    15: Items(_same("groups"), Op.DESCRIBE, _plain(G, GROUP_DENIED), "groups", _described_group),
    19: Items(_same("topics"), Op.CREATE, lambda t, n: (T, t.name, TOPIC_DENIED, True), "topics",
              lambda t, e, m: CreateTopicsResponse.CreatableTopicResult(
                  name=t.name, error_code=e, error_message=m, num_partitions=-1,
                  replication_factor=-1, configs=None)),
    20: Items(lambda v: "topics" if v >= 6 else "topic_names", Op.DELETE, _deleted_topic,
              "responses", lambda t, e, m: DeleteTopicsResponse.DeletableTopicResult(
                  name=t if isinstance(t, str) else t.name, error_code=e, error_message=m,
                  **({} if isinstance(t, str) else {"topic_id": t.topic_id}))),
    21: Items(_same("topics"), Op.DELETE, _topic(), "topics",
              _per_partition(_DR, _DR.DeleteRecordsPartitionResult, low_watermark=-1)),
    23: Items(_same("topics"), Op.DESCRIBE, _topic(attr="topic"), "topics",
              _per_partition(_OE, _OE.EpochEndOffset, name="topic", index="partition",
                             asked_index="partition", leader_epoch=-1, end_offset=-1)),
    28: Items(_same("topics"), Op.READ, _topic(), "topics",
              _per_partition(_TC, _TC.TxnOffsetCommitResponsePartition)),
    32: Items(_same("resources"), Op.DESCRIBE_CONFIGS, _config, "results", _config_answer(_DC)),
    33: Items(_same("resources"), Op.ALTER_CONFIGS, _config, "responses",
              _config_answer(AlterConfigsResponse.AlterConfigsResourceResponse)),
    37: Items(_same("topics"), Op.ALTER, _topic(), "results",
              lambda t, e, m: CreatePartitionsResponse.CreatePartitionsTopicResult(
                  name=t.name, error_code=e, error_message=m)),
    42: Items(_same("groups_names"), Op.DELETE, _plain(G, GROUP_DENIED), "results",
              lambda g, e, m: DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=e)),
    44: Items(_same("resources"), Op.ALTER_CONFIGS, _config, "responses",
              _config_answer(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse)),
    47: Items(_same("topics"), Op.READ, _topic(), "topics",
              _per_partition(_OD, _OD.OffsetDeleteResponsePartition)),
    61: Items(_same("topics"), Op.READ, _topic(), "topics",
              _per_partition(_DP, _DP.PartitionResponse, asked="partition_indexes",
                             error_message=_MESSAGE, active_producers=[])),
    65: Items(_same("transactional_ids"), Op.DESCRIBE, _plain(X, TXN_DENIED), "transaction_states",
              lambda x, e, m: DescribeTransactionsResponse.TransactionState(
                  error_code=e, transactional_id=x, transaction_state="",
                  transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                  producer_epoch=-1, topics=[])),
    69: Items(_same("group_ids"), Op.DESCRIBE, _plain(G, GROUP_DENIED), "groups", _consumer_group),
}


@dataclass(slots=True)
class Split:
    """The denied items taken out of a request, answered after its handler ran."""

    items: Items
    denied: list[tuple[Any, ErrorCode, str]]


def split(decider: Decider, session: Session, request: Any, api_key: int, version: int,
          name_of: NameOf) -> Split | None:
    """Take the items the principal may not touch out of ``request``; None if none."""
    items = ITEMS.get(api_key)
    if items is None:
        return None
    field = items.field(version)
    asked = getattr(request, field, None)
    if not asked:
        return None
    principal, host = session.principal, session.client_host
    kept, denied = [], []
    for item in asked:
        resource = items.resource(item, name_of)
        if resource is None:
            kept.append(item)
            continue
        resource_type, name, error, or_cluster = resource
        if decider.allowed(principal, host, items.operation, resource_type, name) or (
            or_cluster and decider.allowed(principal, host, items.operation, C, CLUSTER_NAME)
        ):
            kept.append(item)
        else:
            denied.append((item, error, message(session, items.operation, resource_type, name)))
    if not denied:
        return None
    setattr(request, field, kept)
    return Split(items, denied)


def merge(response: Any, taken: Split) -> Any:
    """Add the denied items' answers to the handler's response."""
    answers = getattr(response, taken.items.answers, None)
    if answers is None:
        answers = []
        setattr(response, taken.items.answers, answers)
    answers.extend(taken.items.answer(item, error, text) for item, error, text in taken.denied)
    return response


# Responses filtered to what the principal may DESCRIBE.

Filter = Callable[[Decider, Session, Any, Any], None]


def _may(decider: Decider, session: Session, operation: int, rtype: int, name: str) -> bool:
    return decider.allowed(session.principal, session.client_host, operation, rtype, name)


def _list_groups(decider: Decider, session: Session, request: Any, response: Any) -> None:
    """Kafka: DESCRIBE on the cluster lists every group, else those the principal may
    DESCRIBE."""
    if _may(decider, session, Op.DESCRIBE, C, CLUSTER_NAME):
        return
    response.groups = [g for g in response.groups
                       if _may(decider, session, Op.DESCRIBE, G, g.group_id)]


def _list_transactions(decider: Decider, session: Session, request: Any, response: Any) -> None:
    """Kafka lists the transactional ids the principal may DESCRIBE."""
    response.transaction_states = [
        s for s in response.transaction_states
        if _may(decider, session, Op.DESCRIBE, X, s.transactional_id)
    ]


def _describe_transactions(decider: Decider, session: Session, request: Any, response: Any
                           ) -> None:
    """Kafka shows a transaction's partitions of the topics the principal may DESCRIBE."""
    for state in response.transaction_states:
        state.topics = [t for t in state.topics or () if _may(decider, session, Op.DESCRIBE, T, t.topic)]


def _offset_fetch(decider: Decider, session: Session, request: Any, response: Any) -> None:
    """Committed offsets of topics the principal may not DESCRIBE: dropped when all
    topics were asked for, else answered TOPIC_AUTHORIZATION_FAILED."""

    def screen(topics: list[Any] | None, asked_all: bool) -> list[Any]:
        kept = []
        for topic in topics or ():
            if _may(decider, session, Op.DESCRIBE, T, topic.name):
                kept.append(topic)
            elif not asked_all:
                for part in topic.partitions:
                    part.committed_offset, part.metadata, part.error_code = -1, None, TOPIC_DENIED
                kept.append(topic)
        return kept

    if getattr(response, "groups", None):
        asked = {g.group_id: g.topics is None for g in request.groups or ()}
        for group in response.groups:
            group.topics = screen(group.topics, asked.get(group.group_id, True))
    if getattr(response, "topics", None):
        response.topics = screen(response.topics, getattr(request, "topics", None) is None)


def _consumer_group_describe(decider: Decider, session: Session, request: Any, response: Any
                             ) -> None:
    """Kafka's rule: a group whose members' assignments or target assignments name a
    topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED, with
    no members."""
    for group in response.groups:
        if group.error_code:
            continue
        names = {tp.topic_name for m in group.members or ()
                 for a in (m.assignment, m.target_assignment) if a is not None
                 for tp in a.topic_partitions or ()}
        if all(_may(decider, session, Op.DESCRIBE, T, n) for n in names):
            continue
        group.error_code = TOPIC_DENIED
        group.error_message = ("The group has described topic(s) that the client is not "
                               "authorized to describe.")
        group.members = []


FILTERS: dict[int, Filter] = {
    9: _offset_fetch, 16: _list_groups, 65: _describe_transactions, 66: _list_transactions,
    69: _consumer_group_describe,
}
