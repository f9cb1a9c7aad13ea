"""Batch rewriting as Kafka's cleaner does it, in every codec, read back by kafka-python:
base and last offsets, producer fields and codec kept, CRC valid, dropped records gone."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from tidegate.gateway.log.compaction.records import Record
from tidegate.gateway.log.compaction.rewrite import filter_batch
from tidegate.protocol.record_batch import iter_batches, set_base_offset


def _batch(codec: int) -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                  producer_id=7, producer_epoch=1, base_sequence=40,
                                  batch_size=1 << 20)
    for i in range(6):
        b.append(i, timestamp=1_000 + i, key=b"k%d" % (i % 3),
                 value=None if i == 4 else b"v%d" % i * 30, headers=[("h", b"x")])
    raw = bytearray(b.build())
    set_base_offset(raw, 0, 100)
    return raw


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_filter_keeps_offsets_and_fields(codec: int) -> None:
    raw = bytes(_batch(codec))
    (header,) = iter_batches(raw)
    keep_offsets = {101, 104, 105}

    def keep(r: Record, offset: int, ts: int) -> bool:
        assert ts == 1_000 + offset - 100
        return offset in keep_offsets

    out = filter_batch(raw, header, keep)
    assert out.data is not None and out.kept == 3 and out.max_timestamp == 1_005
    (new,) = iter_batches(out.data)  # checks the CRC
    assert (new.base_offset, new.last_offset, new.compression) == (100, 105, codec)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (7, 1, 40)
    batch = DefaultRecordBatch(out.data)
    got = [(r.offset, r.key, r.value, r.headers) for r in batch]
    assert got == [(101, b"k1", b"v1" * 30, [("h", b"x")]), (104, b"k1", None, [("h", b"x")]),
                   (105, b"k2", b"v5" * 30, [("h", b"x")])]
    assert filter_batch(raw, header, lambda r, o, t: True).data == raw
    assert filter_batch(raw, header, lambda r, o, t: False).data is None
