"""Per-item authorization as Kafka's KafkaApis does it, against a real ``tidegate serve``
with the authorizer on: a request naming allowed and denied topics, groups or config
resources is served for the allowed ones, the denied ones get their own error; ListGroups
and ListTransactions list what the principal may DESCRIBE; a fetch session's cached
partitions are checked again on every fetch.

Raw requests go over the PLAINTEXT listener, whose principal is ``User:ANONYMOUS``: it
may do anything to topics starting ``it-ok``, DESCRIBE ``it-ro``, READ groups starting
``it-g-``, DESCRIBE transactional ids starting ``it-x-`` and WRITE ``it-x-w``. alice (SASL) may write and
read ``it-ok`` and DESCRIBE ``it-ro``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from tests.clients.requests import Conn, record_batch
from tests.security import clients
from tests.security.conftest import Secure

OK, RO, NO = "it-ok", "it-ro", "it-no"
ANON = "User:ANONYMOUS"
DENIED = 29  # TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = 30


def _admin(s: Secure) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(clients.librdkafka_conf(s, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin"))


def _acl(resource: Any, name: str, pattern: Any, principal: str, operation: Any) -> Any:
    from confluent_kafka.admin import AclBinding, AclPermissionType

    return AclBinding(resource, name, pattern, principal, "*", operation,
                      AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def granted(secure: Secure) -> Secure:
    from confluent_kafka.admin import AclOperation as O
    from confluent_kafka.admin import NewTopic
    from confluent_kafka.admin import ResourcePatternType as P
    from confluent_kafka.admin import ResourceType as R

    admin = _admin(secure)
    for f in admin.create_topics([NewTopic(t, 1) for t in (OK, RO, NO)]).values():
        f.result(15)
    bindings = [
        _acl(R.TOPIC, OK, P.PREFIXED, ANON, O.ALL),
        _acl(R.TOPIC, RO, P.LITERAL, ANON, O.DESCRIBE),
        _acl(R.GROUP, "it-g-", P.PREFIXED, ANON, O.ALL),
        _acl(R.TRANSACTIONAL_ID, "it-x-", P.PREFIXED, ANON, O.DESCRIBE),
        _acl(R.TRANSACTIONAL_ID, "it-x-w", P.LITERAL, ANON, O.WRITE),
        _acl(R.TOPIC, OK, P.LITERAL, "User:alice", O.WRITE),
        _acl(R.TOPIC, OK, P.LITERAL, "User:alice", O.READ),
        _acl(R.TOPIC, RO, P.LITERAL, "User:alice", O.DESCRIBE),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(15)
    return secure


def _errors(topics: Any, name: str = "name", error: str = "error_code") -> dict[str, list[int]]:
    return {getattr(t, name): [getattr(p, error) for p in t.partitions] for t in topics}


def test_produce_appends_the_allowed_topics_of_one_request(granted: Secure) -> None:
    conn = Conn(granted.ports["PLAINTEXT"])
    try:
        data = [ProduceRequest.TopicProduceData(name=t, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(
                index=0, records=record_batch([b"one", b"two"]))]) for t in (OK, NO, RO)]
        answer = conn.call(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000,
                                          topic_data=data), 9, ProduceResponse)
        got = {t.name: [(p.error_code, p.error_message) for p in t.partition_responses]
               for t in answer.responses}
        assert got[OK] == [(0, None)]
        assert got[NO][0] == (DENIED, "User:ANONYMOUS may not WRITE topic 'it-no'")
        assert got[RO][0][0] == DENIED
        # Fetch and ListOffsets likewise: the allowed topic is served.
        fetch = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[FetchRequest.FetchTopic(topic=t, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=0, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)])
                for t in (OK, NO)])
        fetched = conn.call(fetch, 11, FetchResponse)
        parts = {t.topic: t.partitions[0] for t in fetched.responses}
        assert parts[OK].error_code == 0 and parts[OK].high_watermark == 2
        assert parts[NO].error_code == DENIED
        lo = ListOffsetsRequest.ListOffsetsTopic
        listed = conn.call(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            lo(name=t, partitions=[lo.ListOffsetsPartition(partition_index=0, timestamp=-1)])
            for t in (OK, NO)]), 5, ListOffsetsResponse)
        assert {t.name: (t.partitions[0].error_code, t.partitions[0].offset)
                for t in listed.topics} == {OK: (0, 2), NO: (DENIED, -1)}
    finally:
        conn.close()


@pytest.mark.parametrize("family", ["librdkafka", "kafka-python"])
def test_a_producer_batching_two_topics_keeps_the_allowed_one(granted: Secure, family: str) -> None:
    """alice may DESCRIBE it-ro (so the client sends it) but not WRITE it: one produce
    request carries both topics, and only it-ro's records fail."""
    if family == "librdkafka":
        from confluent_kafka import KafkaError, Producer

        conf = clients.librdkafka_conf(granted, "SASL_SSL", "SCRAM-SHA-512", "alice")
        producer = Producer({**conf, "linger.ms": 200, "message.timeout.ms": 10000})
        outcome: dict[str, Any] = {}
        for topic in (OK, RO):
            producer.produce(topic, b"v-" + topic.encode(),
                             on_delivery=lambda err, msg: outcome.__setitem__(msg.topic(), err))
        producer.flush(15)
        assert outcome[OK] is None, outcome
        assert outcome[RO].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcome
        return
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    kp = KafkaProducer(**clients.kafka_python_conf(granted, "SASL_PLAINTEXT", "PLAIN", "alice"),
                       linger_ms=200)
    try:
        ok, ro = kp.send(OK, b"kp-ok"), kp.send(RO, b"kp-ro")
        kp.flush(15)
        assert ok.get(15).topic == OK
        with pytest.raises(TopicAuthorizationFailedError):
            ro.get(15)
    finally:
        kp.close(5)


def test_admin_and_group_apis_answer_each_item(granted: Secure) -> None:
    conn = Conn(granted.ports["PLAINTEXT"])
    try:
        created = conn.call(CreateTopicsRequest(topics=[
            CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1,
                                               assignments=[], configs=[])
            for n in ("it-ok-new", "zz-new")], timeout_ms=10000, validate_only=False),
            5, CreateTopicsResponse)
        assert {t.name: t.error_code for t in created.topics} == {"it-ok-new": 0, "zz-new": DENIED}

        configs = conn.call(DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name=n, configuration_keys=None) for n in (OK, NO)
        ] + [DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=4, resource_name="0", configuration_keys=None)],
            include_synonyms=False), 1, DescribeConfigsResponse)
        got = {(r.resource_type, r.resource_name): r.error_code for r in configs.results}
        assert got == {(2, OK): 0, (2, NO): DENIED, (4, "0"): 31}
        assert any(c.name == "retention.ms" for r in configs.results for c in r.configs
                   if r.resource_name == OK)

        dr = DeleteRecordsRequest.DeleteRecordsTopic
        deleted = conn.call(DeleteRecordsRequest(topics=[
            dr(name=n, partitions=[dr.DeleteRecordsPartition(partition_index=0, offset=0)])
            for n in (OK, NO)], timeout_ms=5000), 1, DeleteRecordsResponse)
        assert _errors(deleted.topics) == {OK: [0], NO: [DENIED]}

        oe = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
        epochs = conn.call(OffsetForLeaderEpochRequest(replica_id=-1, topics=[
            oe(topic=n, partitions=[oe.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=0)]) for n in (OK, NO)]),
            3, OffsetForLeaderEpochResponse)
        assert {t.topic: t.partitions[0].error_code for t in epochs.topics} == {OK: 0, NO: DENIED}

        producers = conn.call(DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name=n, partition_indexes=[0]) for n in (OK, NO)
        ]), 0, DescribeProducersResponse)
        assert _errors(producers.topics) == {OK: [0], NO: [DENIED]}

        grown = conn.call(CreatePartitionsRequest(topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=2, assignments=None)
            for n in ("it-ok-new", NO)], timeout_ms=10000, validate_only=True),
            1, CreatePartitionsResponse)
        assert {r.name: r.error_code for r in grown.results} == {"it-ok-new": 0, NO: DENIED}

        # Offsets: the group is checked first, then each topic.
        oc = OffsetCommitRequest.OffsetCommitRequestTopic
        committed = conn.call(OffsetCommitRequest(
            group_id="it-g-a", generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, retention_time_ms=-1, topics=[
                oc(name=n, partitions=[oc.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_metadata="")])
                for n in (OK, NO)]), 5, OffsetCommitResponse)
        assert _errors(committed.topics) == {OK: [0], NO: [DENIED]}
        everything = conn.call(OffsetFetchRequest(group_id="it-g-a", topics=None), 5,
                               OffsetFetchResponse)
        assert [(t.name, t.partitions[0].committed_offset) for t in everything.topics] == [(OK, 1)]
        og = OffsetFetchRequest.OffsetFetchRequestGroup
        groups = conn.call(OffsetFetchRequest(groups=[og(group_id=g, topics=None)
                                                      for g in ("it-g-a", "other")],
                                              require_stable=False), 8, OffsetFetchResponse)
        assert {g.group_id: g.error_code for g in groups.groups} == {"it-g-a": 0,
                                                                      "other": GROUP_DENIED}

        described = conn.call(DescribeGroupsRequest(groups=["it-g-a", "other"]), 3,
                              DescribeGroupsResponse)
        assert {g.group_id: g.error_code for g in described.groups} == {
            "it-g-a": 0, "other": GROUP_DENIED}
        gone = conn.call(DeleteGroupsRequest(groups_names=["it-g-a", "other"]), 1,
                         DeleteGroupsResponse)
        assert {r.group_id: r.error_code for r in gone.results} == {"it-g-a": 0,
                                                                      "other": GROUP_DENIED}

        dropped = conn.call(DeleteTopicsRequest(topic_names=["it-ok-new", NO], timeout_ms=10000),
                            4, DeleteTopicsResponse)
        assert {r.name: r.error_code for r in dropped.responses} == {"it-ok-new": 0, NO: DENIED}
    finally:
        conn.close()
    from confluent_kafka.admin import AdminClient

    topics = AdminClient(clients.librdkafka_conf(
        granted, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin")).list_topics(timeout=10).topics
    assert NO in topics and "it-ok-new" not in topics


def test_list_groups_and_transactions_show_what_the_principal_may_describe(
    granted: Secure,
) -> None:
    from confluent_kafka import Producer

    conf = clients.librdkafka_conf(granted, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin")
    producers = []
    for txn in ("it-x-mine", "other-txn"):  # transactions left open while listed
        producer = Producer({**conf, "transactional.id": txn})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(OK, b"in-" + txn.encode())
        producer.flush(15)
        producers.append(producer)
    conn = Conn(granted.ports["PLAINTEXT"])
    try:
        for group in ("it-g-listed", "hidden-group"):  # the admin's commits make the groups
            admin_commit(granted, group)
        listed = conn.call(ListGroupsRequest(states_filter=[]), 4, ListGroupsResponse)
        names = {g.group_id for g in listed.groups}
        assert "it-g-listed" in names and "hidden-group" not in names, names
        txns = conn.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0,
                         ListTransactionsResponse)
        assert [s.transactional_id for s in txns.transaction_states] == ["it-x-mine"]
    finally:
        conn.close()
        for producer in producers:
            producer.abort_transaction(15)


def admin_commit(s: Secure, group: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    conf = clients.librdkafka_conf(s, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin")
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(OK, 0, 1)], asynchronous=False)
    finally:
        consumer.close()


def test_a_fetch_session_stops_serving_a_partition_whose_acl_is_removed(
    granted: Secure,
) -> None:
    """KIP-227 sessions keep partitions between fetches; READ is checked on each one."""
    from confluent_kafka.admin import AclBindingFilter, AclPermissionType
    from confluent_kafka.admin import AclOperation as O
    from confluent_kafka.admin import ResourcePatternType as P
    from confluent_kafka.admin import ResourceType as R

    admin = _admin(granted)
    reader = _acl(R.TOPIC, "it-sess", P.LITERAL, ANON, O.READ)
    admin.create_acls([reader])[reader].result(15)
    conn = Conn(granted.ports["PLAINTEXT"])
    topic = "it-sess"
    try:
        from confluent_kafka.admin import NewTopic

        admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=0, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)

        def fetch(session_id: int, epoch: int, topics: list[Any]) -> Any:
            return conn.call(FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
                forgotten_topics_data=[], rack_id=""), 11, FetchResponse)

        full = fetch(0, 0, [FetchRequest.FetchTopic(topic=topic, partitions=[part])])
        assert full.error_code == 0 and full.session_id != 0
        assert full.responses[0].partitions[0].error_code == 0
        session = full.session_id
        assert fetch(session, 1, []).responses == []  # nothing changed: nothing sent
        gone = AclBindingFilter(R.TOPIC, topic, P.LITERAL, ANON, None, O.READ,
                                AclPermissionType.ALLOW)
        assert admin.delete_acls([gone])[gone].result(15)
        epoch, deadline = 2, time.monotonic() + 10
        while True:  # the ACL store of this node changes at once; a retry covers a reload
            answer = fetch(session, epoch, [])
            epoch += 1
            if answer.responses or time.monotonic() > deadline:
                break
        assert [(t.topic, t.partitions[0].error_code) for t in answer.responses] == [
            (topic, DENIED)]
    finally:
        conn.close()


def test_transaction_apis_refuse_as_kafka_does(granted: Secure) -> None:
    """AddPartitionsToTxn adds nothing when a topic is denied (the others: not
    attempted); WriteTxnMarkers without CLUSTER_ACTION answers each partition."""
    from kafka.protocol.producer import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
    )

    conn = Conn(granted.ports["PLAINTEXT"])
    try:
        added = conn.call(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="it-x-w", v3_and_below_producer_id=7,
            v3_and_below_producer_epoch=0, v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=n, partitions=[0])
                for n in (OK, NO)]), 3, AddPartitionsToTxnResponse)
        assert {t.name: [p.partition_error_code for p in t.results_by_partition]
                for t in added.results_by_topic_v3_and_below} == {OK: [55], NO: [DENIED]}
        m = WriteTxnMarkersRequest.WritableTxnMarker
        marked = conn.call(WriteTxnMarkersRequest(markers=[m(
            producer_id=7, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=[m.WritableTxnMarkerTopic(name=OK, partition_indexes=[0])])]),
            1, WriteTxnMarkersResponse)
        assert [(t.name, [p.error_code for p in t.partitions])
                for r in marked.markers for t in r.topics] == [(OK, [31])]
    finally:
        conn.close()


def test_authorized_operations_are_what_the_principal_may_do(granted: Secure) -> None:
    """confluent-kafka's describe calls with ``include_authorized_operations``: Kafka's
    supported operations of each resource type that the ACLs allow (DESCRIBE implied by
    READ and WRITE; all of them for a super user)."""
    from confluent_kafka import Consumer, TopicCollection, TopicPartition
    from confluent_kafka.admin import AclOperation as O
    from confluent_kafka.admin import AdminClient

    anonymous = clients.librdkafka_conf(granted, "PLAINTEXT", None, None)
    consumer = Consumer({**anonymous, "group.id": "it-g-ops"})
    try:
        consumer.commit(offsets=[TopicPartition(OK, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    all_topic = {O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER, O.DESCRIBE_CONFIGS,
                 O.ALTER_CONFIGS}
    cases = (
        (anonymous, {OK: all_topic, RO: {O.DESCRIBE}}, {O.READ, O.DESCRIBE, O.DELETE}),
        (clients.librdkafka_conf(granted, "SASL_PLAINTEXT", "PLAIN", "alice"),
         {OK: {O.READ, O.WRITE, O.DESCRIBE}, RO: {O.DESCRIBE}}, None),
    )
    for conf, topics, group in cases:
        admin = AdminClient(conf)
        described = admin.describe_topics(TopicCollection([OK, RO]), include_authorized_operations=True)
        assert {t: set(f.result(15).authorized_operations) for t, f in described.items()} == topics
        if group is not None:
            (g,) = admin.describe_consumer_groups(["it-g-ops"], include_authorized_operations=True).values()
            assert set(g.result(15).authorized_operations) == group
    admin = _admin(granted)  # a super user
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert set(cluster.authorized_operations) == {
        O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE,
        O.ALTER, O.DESCRIBE}
