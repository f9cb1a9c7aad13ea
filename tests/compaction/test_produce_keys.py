"""Produce into a compacted topic: keyed records are taken in every codec, a record
without a key gets INVALID_RECORD with Kafka's message (confluent-kafka against
``tidegate serve``); the record decoder's bounds, directly."""

from __future__ import annotations

import asyncio
import gzip
import types
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tidegate.gateway.log import validate
from tidegate.gateway.log.compaction import records
from tidegate.gateway.log.compaction.records import InvalidRecordsError
from tidegate.protocol.record_batch import iter_batches

from tests.clients.server import Tidegate
from tests.compaction.batches import keyed_batch
from tests.gateway.conftest import Node

TIMEOUT_S = 20


def _deliver(tidegate: Tidegate, topic: str, codec: str, items: list[tuple[bytes | None, bytes]]
             ) -> list[Any]:
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": tidegate.bootstrap, "compression.type": codec,
                  "linger.ms": 5, "retries": 0, "enable.idempotence": False})
    for key, value in items:
        p.produce(topic, key=key, value=value, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(TIMEOUT_S) == 0
    return errors


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyless_record_is_refused(tidegate: Tidegate, codec: str) -> None:
    topic = f"keys-{codec}"
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"}),
                                  NewTopic(topic + "-d", 1, 1)]).values():
        f.result(timeout=TIMEOUT_S)
    keyed = [(b"k%d" % i, b"x" * 200) for i in range(20)]
    assert _deliver(tidegate, topic, codec, keyed) == [None] * 20
    errors = _deliver(tidegate, topic, codec, [(None, b"no key")])
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]
    # A delete topic takes it: its records are never decoded.
    assert _deliver(tidegate, topic + "-d", codec, [(None, b"no key")]) == [None]


def _batch(keys: list[bytes | None]) -> tuple[bytes, Any]:
    raw = keyed_batch([(k, b"v") for k in keys])
    (header,) = iter_batches(raw)
    return raw, header


def test_keyless_message_names_the_partition() -> None:
    raw, header = _batch([b"a", None, b"c", None])
    configs = {"cleanup.policy": "compact"}
    refused = records.compacted_produce_error(configs, raw, header, "t", 3)
    one = "Compacted topic cannot accept message without key in topic partition t-3"
    assert refused is not None and refused.record_errors == ((1, one), (3, one))
    assert refused.message == (  # Kafka's LogValidator.processRecordErrors
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{one}'), "
        f"RecordError(batchIndex=3, message='{one}')]")
    raw, header = _batch([b"a", b"b"])
    assert records.compacted_produce_error(configs, raw, header, "t", 3) is None
    assert records.compacted_produce_error({}, raw, header, "t", 3) is None


def test_decompression_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "DECOMPRESSED_BYTES_MAX", 1000)
    bomb = gzip.compress(bytes(100_000))
    with pytest.raises(InvalidRecordsError, match="more than 1000"):
        records.decompress(records.CODEC_GZIP, bomb)
    with pytest.raises(InvalidRecordsError):
        records.decompress(records.CODEC_ZSTD, b"not zstd")
    with pytest.raises(InvalidRecordsError):
        list(records.iter_records(b"\x7f\x00", 1))


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
async def test_compressed_batch_is_decompressed_once(
    node: Node, codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The produce path decompresses a compressed batch of a compacted topic once: the
    validation's records area is what the key check reads."""
    calls: list[int] = []
    for module, name in ((validate, "_decompress"), (records, "decompress")):
        real = getattr(module, name)

        def counted(*args: Any, _real: Any = real) -> Any:
            calls.append(1)
            return _real(*args)

        monkeypatch.setattr(module, name, counted)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
    topic = f"once-{codec}"
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})]
                                 ).values():
        await asyncio.to_thread(f.result, TIMEOUT_S)
    server = types.SimpleNamespace(bootstrap=f"127.0.0.1:{node.port}")
    errors = await asyncio.to_thread(
        _deliver, server, topic, codec, [(b"k%d" % i, b"v") for i in range(20)])  # type: ignore[arg-type]
    assert errors and all(e is None for e in errors)
    batches = len(calls)
    assert 1 <= batches <= 20
    calls.clear()
    errors = await asyncio.to_thread(_deliver, server, topic, codec, [(None, b"v")])  # type: ignore[arg-type]
    assert errors[0].code() == KafkaError.INVALID_RECORD
    assert len(calls) == 1
