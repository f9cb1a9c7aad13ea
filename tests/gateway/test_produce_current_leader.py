"""Produce v10+ answers NOT_LEADER_OR_FOLLOWER with the current leader, its epoch and its
address (KIP-951's tagged fields), as kafka-python's own schema decodes them."""

from __future__ import annotations

from kafka.protocol.producer import ProduceResponse
from tidegate.protocol.produce import PartitionProduceResult, encode_produce_response


def test_produce_response_tells_the_current_leader_from_v10() -> None:
    moved = PartitionProduceResult(0, 6, -1, -1, "moved", current_leader=(2, 7))
    ok = PartitionProduceResult(1, 0, 5, 0)
    for version in (9, 10, 12):
        raw = encode_produce_response(version, [("t", [moved, ok])], 0, [(2, "h", 9093)])
        resp = ProduceResponse.decode(raw, version=version)
        p0, p1 = resp.responses[0].partition_responses
        assert (p0.error_code, p1.base_offset) == (6, 5)
        if version >= 10:
            assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (2, 7)
            assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [(2, "h", 9093)]
        plain = ProduceResponse.decode(encode_produce_response(version, [("t", [ok])]),
                                       version=version)
        assert plain.responses[0].partition_responses[0].base_offset == 5
