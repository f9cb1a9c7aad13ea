"""``protocol.produce``: our Produce request decoder against kafka-python's encoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest
from tidegate.protocol.errors import KafkaProtocolError
from tidegate.protocol.produce import decode_produce_request

_T = ProduceRequest.TopicProduceData
_P = _T.PartitionProduceData

partitions = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.none() | st.binary(max_size=300)), max_size=4
)
topics = st.lists(st.tuples(st.text(min_size=1, max_size=40), partitions), max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(3, 12),
    transactional_id=st.none() | st.text(max_size=50),
    acks=st.sampled_from([-1, 0, 1, 2]),
    timeout_ms=st.integers(-(2**31), 2**31 - 1),
    data=topics,
)
def test_decodes_what_kafka_python_encodes(
    version: int, transactional_id: str | None, acks: int, timeout_ms: int,
    data: list[tuple[str, list[tuple[int, bytes | None]]]],
) -> None:
    request = ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
        topic_data=[_T(name=n, partition_data=[_P(index=i, records=r) for i, r in ps]) for n, ps in data],
    )
    raw = bytearray(b"header" + request.encode(version=version))
    got = decode_produce_request(memoryview(raw), 6, version)
    assert (got.transactional_id, got.acks, got.timeout_ms) == (transactional_id, acks, timeout_ms)
    assert [
        (t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
        for t in got.topic_data
    ] == data
    for t in got.topic_data:  # records are slices of the frame, not copies
        for p in t.partition_data:
            if p.records is not None and len(p.records):
                assert p.records.obj is raw
    first = got.topic_data[0].partition_data[0] if got.topic_data and got.topic_data[0].partition_data else None
    heads = [p.head for t in got.topic_data for p in t.partition_data if p.head is not None]
    if first is not None and first.records is not None:
        assert len(heads) == 1 and heads[0] is first.head  # only the first partition's
        assert bytes(first.head[len(first.head) - len(first.records) :]) == bytes(first.records)
    else:
        assert not heads


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_truncated_bodies_are_protocol_errors(version: int) -> None:
    request = ProduceRequest(
        transactional_id="tx", acks=-1, timeout_ms=1000,
        topic_data=[_T(name="topic", partition_data=[_P(index=0, records=b"x" * 50)])],
    )
    raw = bytes(request.encode(version=version))
    for cut in range(len(raw)):
        with pytest.raises(KafkaProtocolError):
            decode_produce_request(memoryview(raw[:cut]), 0, version)


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(3, 12),
    throttle=st.integers(0, 2**31 - 1),
    data=st.lists(
        st.tuples(
            st.text(max_size=30),
            st.lists(
                st.tuples(
                    st.integers(-(2**31), 2**31 - 1), st.integers(-(2**15), 2**15 - 1),
                    st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
                    st.none() | st.text(max_size=40),
                ),
                max_size=4,
            ),
        ),
        max_size=4,
    ),
)
def test_response_encodes_as_kafka_python_does(
    version: int, throttle: int, data: list[tuple[str, list[tuple[int, int, int, int, str | None]]]]
) -> None:
    from kafka.protocol.producer import ProduceResponse
    from tidegate.protocol.produce import PartitionProduceResult, encode_produce_response

    t, p = ProduceResponse.TopicProduceResponse, ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    theirs = ProduceResponse(
        responses=[
            t(name=n, partition_responses=[
                p(index=i, error_code=e, base_offset=b, log_append_time_ms=-1, log_start_offset=s,
                  error_message=m)
                for i, e, b, s, m in ps
            ])
            for n, ps in data
        ],
        throttle_time_ms=throttle,
    )
    ours = encode_produce_response(
        version,
        [(n, [PartitionProduceResult(i, e, b, s, m) for i, e, b, s, m in ps]) for n, ps in data],
        throttle,
    )
    assert ours == bytes(theirs.encode(version=version))
