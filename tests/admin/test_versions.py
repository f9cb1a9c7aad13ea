"""Every version of every admin API tidegate advertises, over raw frames encoded by
kafka-python's message classes: each answer decodes at its version and carries the
expected error codes."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse
from tidegate.gateway.handlers import (
    alter_configs,
    create_partitions,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    incremental_alter_configs,
    sasl_handshake,
)
from tidegate.protocol.errors import ErrorCode

from tests.gateway.conftest import Node, RawClient

_TOPIC = 2


def _create(name: str, partitions: int, configs: dict[str, str] | None = None) -> Any:
    c = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(topics=[c(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[],
        configs=[c.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )], timeout_ms=1000, validate_only=False)


async def _call(c: RawClient, request: Any, version: int, response: Any) -> Any:
    return await c.call(request, version, response)


async def test_every_version_of_every_admin_api(node: Node) -> None:
    c = await node.client()
    for v in range(2, 8):
        answer = await _call(c, _create(f"t{v}", 1), v, CreateTopicsResponse)
        assert answer.topics[0].error_code == 0, v
    answer = await _call(c, _create("bad", 1, {"retention.ms": "-5"}), 7, CreateTopicsResponse)
    assert answer.topics[0].error_code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in answer.topics[0].error_message

    spec = describe_configs.SPEC
    for v in range(spec.min_version, spec.max_version + 1):
        r = DescribeConfigsRequest.DescribeConfigsResource
        request = DescribeConfigsRequest(resources=[
            r(resource_type=_TOPIC, resource_name="t2", configuration_keys=["retention.ms"]),
            r(resource_type=4, resource_name="0", configuration_keys=None),
            r(resource_type=_TOPIC, resource_name="nope", configuration_keys=None),
            r(resource_type=8, resource_name="0", configuration_keys=None),
        ], include_synonyms=True, include_documentation=True)
        answer = await _call(c, request, v, DescribeConfigsResponse)
        codes = [res.error_code for res in answer.results]
        assert codes == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST]
        (entry,) = answer.results[0].configs
        assert (entry.name, entry.value) == ("retention.ms", "604800000")
        if v >= 1:
            assert [s.name for s in entry.synonyms] == ["log.retention.ms"]
        if v >= 3:
            assert entry.documentation and entry.config_type == 5  # LONG

    spec = alter_configs.SPEC
    for v in range(spec.min_version, spec.max_version + 1):
        r = AlterConfigsRequest.AlterConfigsResource
        request = AlterConfigsRequest(resources=[
            r(resource_type=_TOPIC, resource_name="t2", configs=[
                r.AlterableConfig(name="retention.ms", value=str(1000 + v))]),
            r(resource_type=_TOPIC, resource_name="t3", configs=[
                r.AlterableConfig(name="retention.ms", value="x")]),
        ], validate_only=False)
        answer = await _call(c, request, v, AlterConfigsResponse)
        assert [res.error_code for res in answer.responses] == [0, ErrorCode.INVALID_CONFIG]
    spec = incremental_alter_configs.SPEC
    for v in range(spec.min_version, spec.max_version + 1):
        r = IncrementalAlterConfigsRequest.AlterConfigsResource
        request = IncrementalAlterConfigsRequest(resources=[
            r(resource_type=_TOPIC, resource_name="t2", configs=[
                r.AlterableConfig(name="cleanup.policy", config_operation=2, value="compact"),
                r.AlterableConfig(name="retention.ms", config_operation=1, value=None)]),
            r(resource_type=_TOPIC, resource_name="t3", configs=[
                r.AlterableConfig(name="segment.ms", config_operation=9, value="1")]),
        ], validate_only=False)
        answer = await _call(c, request, v, IncrementalAlterConfigsResponse)
        assert [res.error_code for res in answer.responses] == [0, ErrorCode.INVALID_REQUEST]
    assert node.gateway is not None and node.gateway.ctx is not None
    info = node.gateway.ctx.topics.get("t2")
    assert info is not None and info.configs == {"cleanup.policy": "delete,compact"}

    spec = create_partitions.SPEC
    for v in range(spec.min_version, spec.max_version + 1):
        t = CreatePartitionsRequest.CreatePartitionsTopic
        request = CreatePartitionsRequest(topics=[
            t(name="t4", count=2 + v, assignments=None), t(name="t5", count=1, assignments=None),
        ], timeout_ms=1000, validate_only=False)
        answer = await _call(c, request, v, CreatePartitionsResponse)
        assert [res.error_code for res in answer.results] == [0, ErrorCode.INVALID_PARTITIONS]

    spec = delete_records.SPEC
    for v in range(spec.min_version, spec.max_version + 1):
        t = DeleteRecordsRequest.DeleteRecordsTopic
        request = DeleteRecordsRequest(topics=[t(name="t4", partitions=[
            t.DeleteRecordsPartition(partition_index=0, offset=-1),
            t.DeleteRecordsPartition(partition_index=1, offset=5),
            t.DeleteRecordsPartition(partition_index=99, offset=0),
        ])], timeout_ms=1000)
        answer = await _call(c, request, v, DeleteRecordsResponse)
        got = [(p.error_code, p.low_watermark) for p in answer.topics[0].partitions]
        assert got == [(0, 0), (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
                       (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]

    spec = describe_cluster.SPEC
    for v in range(spec.min_version, spec.max_version + 1):
        request = DescribeClusterRequest(include_cluster_authorized_operations=False,
                                         endpoint_type=1, include_fenced_brokers=False)
        answer = await _call(c, request, v, DescribeClusterResponse)
        assert answer.error_code == 0 and answer.cluster_id == "tidegate"
        assert [(b.broker_id, b.port) for b in answer.brokers] == [(0, node.port)]
    answer = await _call(c, DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=2,
        include_fenced_brokers=False), 1, DescribeClusterResponse)
    assert answer.error_code == describe_cluster.UNSUPPORTED_ENDPOINT_TYPE

    spec = sasl_handshake.SPEC
    for v in range(spec.min_version, spec.max_version + 1):
        answer = await _call(c, SaslHandshakeRequest(mechanism="PLAIN"), v, SaslHandshakeResponse)
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == []

    spec = delete_topics.SPEC
    names = [f"d{v}" for v in range(spec.max_version + 1)]
    for name in names:
        assert (await _call(c, _create(name, 1), 7, CreateTopicsResponse)).topics[0].error_code == 0
    for v in range(spec.min_version, spec.max_version + 1):
        name = names[v]
        if v >= 6:
            info = node.gateway.ctx.topics.get(name)
            assert info is not None
            s = DeleteTopicsRequest.DeleteTopicState
            request = DeleteTopicsRequest(topics=[
                s(name=None, topic_id=info.topic_id), s(name=None, topic_id=uuid.uuid4())],
                timeout_ms=1000)
        else:
            request = DeleteTopicsRequest(topic_names=[name, "nope"], timeout_ms=1000)
        answer = await _call(c, request, v, DeleteTopicsResponse)
        missing = ErrorCode.UNKNOWN_TOPIC_ID if v >= 6 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert [r.error_code for r in answer.responses] == [0, missing], v
        assert answer.responses[0].name == name
        assert node.gateway.ctx.topics.get(name) is None
    await c.close()


async def test_create_topics_answers_as_kafka_4(node: Node) -> None:
    """What the clients' own checks let through, on the wire: a name given twice creates
    neither and is answered once; assignments with a partition count or replication
    factor other than -1 are INVALID_REQUEST (Kafka's ControllerApis and
    ReplicationControlManager)."""
    c = await node.client()
    try:
        t = CreateTopicsRequest.CreatableTopic
        a = t.CreatableReplicaAssignment
        answer = await _call(c, CreateTopicsRequest(topics=[
            t(name="dup", num_partitions=1, replication_factor=1, assignments=[], configs=[]),
            t(name="single", num_partitions=1, replication_factor=1, assignments=[], configs=[]),
            t(name="dup", num_partitions=2, replication_factor=1, assignments=[], configs=[]),
            t(name="rf", num_partitions=-1, replication_factor=1,
              assignments=[a(partition_index=0, broker_ids=[0])], configs=[]),
            t(name="np", num_partitions=1, replication_factor=-1,
              assignments=[a(partition_index=0, broker_ids=[0])], configs=[]),
            t(name="multi", num_partitions=-1, replication_factor=-1,
              assignments=[a(partition_index=0, broker_ids=[0]), a(partition_index=0, broker_ids=[0])],
              configs=[]),
            t(name="nulls", num_partitions=1, replication_factor=1, assignments=[], configs=[
                t.CreatableTopicConfig(name="retention.ms", value=None),
                t.CreatableTopicConfig(name="segment.ms", value=None)]),
            t(name="twice", num_partitions=1, replication_factor=1, assignments=[], configs=[
                t.CreatableTopicConfig(name="retention.ms", value="1000"),
                t.CreatableTopicConfig(name="retention.ms", value="2000")]),
        ], timeout_ms=1000, validate_only=False), 7, CreateTopicsResponse)
        got = [(r.name, r.error_code, r.error_message) for r in answer.topics]
        assert got == [
            ("single", 0, None),
            ("rf", ErrorCode.INVALID_REQUEST,
             "A manual partition assignment was specified, but replication factor was not set to -1."),
            ("np", ErrorCode.INVALID_REQUEST,
             "A manual partition assignment was specified, but numPartitions was not set to -1."),
            ("multi", ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "Found multiple manual partition assignments for partition 0"),
            ("nulls", ErrorCode.INVALID_CONFIG,
             "Null value not supported for topic configs: retention.ms,segment.ms"),
            ("twice", 0, None),
            ("dup", ErrorCode.INVALID_REQUEST, "Duplicate topic name."),
        ]
        assert node.gateway is not None
        topics = node.gateway.ctx.topics
        assert topics.get("dup") is None and topics.get("single") is not None
        twice = topics.get("twice")
        assert twice is not None and twice.configs["retention.ms"] == "2000"  # the last one
    finally:
        await c.close()
