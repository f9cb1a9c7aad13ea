"""What admin UIs call, on the wire: DescribeLogDirs sizes against what was appended,
ListPartitionReassignments, DescribeClientQuotas (and its filter errors), and the broker
configs tools read."""

from __future__ import annotations

from kafka.protocol.admin import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from tidegate.gateway.log.envelope import ENVELOPE_BYTES
from tidegate.protocol.errors import ErrorCode as E

from tests.clients.requests import record_batch
from tests.gateway.conftest import Node
from tests.gateway.test_fetch_sessions import _produce, _topic


async def test_log_dir_sizes_are_what_was_appended(node: Node) -> None:
    c = await node.client()
    await _topic(c, "sz", 3)
    await _produce(c, "sz", 0, 4)
    await _produce(c, "sz", 0, 2)
    await _produce(c, "sz", 2, 1)
    appended = {
        0: len(record_batch([b"v%d" % i for i in range(4)])) + len(record_batch([b"v0", b"v1"]))
        + 2 * ENVELOPE_BYTES,
        1: 0,
        2: len(record_batch([b"v0"])) + ENVELOPE_BYTES,
    }
    resp = await c.call(DescribeLogDirsRequest(topics=None), 4, DescribeLogDirsResponse)
    assert len(resp.results) == 2  # the Tier-1 and the Tier-2 directory
    sizes: dict[int, int] = {}
    for result in resp.results:
        assert result.error_code == 0 and result.total_bytes > 0
        for t in result.topics:
            assert t.name == "sz"
            for p in t.partitions:
                sizes[p.partition_index] = sizes.get(p.partition_index, 0) + p.partition_size
    assert sizes == appended
    # One partition asked for; an unknown topic is left out, as Kafka does.
    req = DescribeLogDirsRequest(topics=[
        DescribeLogDirsRequest.DescribableLogDirTopic(topic="sz", partitions=[2]),
        DescribeLogDirsRequest.DescribableLogDirTopic(topic="nope", partitions=[0])])
    resp = await c.call(req, 1, DescribeLogDirsResponse)
    assert {(t.name, p.partition_index) for r in resp.results for t in r.topics
            for p in t.partitions} == {("sz", 2)}
    await c.close()


async def test_reassignments_quotas_and_broker_configs(node: Node) -> None:
    c = await node.client()
    resp = await c.call(ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None), 0,
                        ListPartitionReassignmentsResponse)
    assert resp.error_code == 0 and resp.topics == []
    comp = DescribeClientQuotasRequest.ComponentData
    ok = await c.call(DescribeClientQuotasRequest(components=[
        comp(entity_type="user", match_type=2, match=None)], strict=False), 1,
        DescribeClientQuotasResponse)
    assert ok.error_code == 0 and ok.entries == []
    bad = await c.call(DescribeClientQuotasRequest(components=[
        comp(entity_type="user", match_type=0, match=None)], strict=False), 1,
        DescribeClientQuotasResponse)
    assert bad.error_code == E.INVALID_REQUEST and "exact match" in bad.error_message
    bad = await c.call(DescribeClientQuotasRequest(components=[
        comp(entity_type="user", match_type=1, match=None),
        comp(entity_type="user", match_type=2, match=None)], strict=False), 1,
        DescribeClientQuotasResponse)
    assert bad.error_code == E.INVALID_REQUEST and "Duplicate" in bad.error_message
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="0", configuration_keys=None)],
        include_synonyms=True, include_documentation=True)
    resp = await c.call(req, 4, DescribeConfigsResponse)
    configs = {e.name: e for e in resp.results[0].configs}
    assert configs["inter.broker.protocol.version"].value == "3.9-IV0"
    assert "log.message.format.version" not in configs  # removed in Kafka 4.0 (KIP-724)
    # Set by the test's config (listen address): static, with the default as synonym.
    listeners = configs["listeners"]
    assert listeners.config_source == 4
    assert [s.source for s in listeners.synonyms] == [4, 5]
    # Left at its default: the default source, one synonym.
    slots = configs["max.incremental.fetch.session.cache.slots"]
    assert (slots.value, slots.config_source) == ("1000", 5)
    assert len(slots.synonyms) == 1
    await c.close()
