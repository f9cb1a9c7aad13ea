"""Each partition's transaction index over a real offset index (RocksDB): transactions
opened by transactional batches, closed by markers, the LSO, the aborted list a
read_committed fetch gets, trimming at the log start, and reloading from RocksDB."""

from __future__ import annotations

import struct
from pathlib import Path

from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.txn.markers import ABORT, COMMIT, build_marker, marker_header, marker_type
from tidegate.gateway.txn.partition_txns import AbortedTxn, PartitionTxns
from tidegate.protocol.record_batch import ATTR_TRANSACTIONAL, iter_batches


def _data_batch(pid: int, base: int, count: int, transactional: bool = True) -> bytes:
    """A header-only view is enough for the index: a marker's layout with data attributes."""
    raw = bytearray(build_marker(pid, 0, True, 0))
    struct.pack_into(">q", raw, 0, base)
    struct.pack_into(">h", raw, 21, ATTR_TRANSACTIONAL if transactional else 0)
    struct.pack_into(">i", raw, 23, count - 1)
    struct.pack_into(">i", raw, 57, count)
    return bytes(raw)


def _marker(pid: int, offset: int, commit: bool) -> bytes:
    raw = bytearray(build_marker(pid, 0, commit, 0))
    struct.pack_into(">q", raw, 0, offset)
    return bytes(raw)


def _index(txns: PartitionTxns, index: OffsetIndex, blob: bytes) -> None:
    write = index.batch()
    txns.on_indexed(write, "t", 0, list(iter_batches(blob, check_crc=False)), blob)
    write.commit()


def test_markers_round_trip() -> None:
    for commit, kind in ((True, COMMIT), (False, ABORT)):
        batch = build_marker(7, 3, commit, 1234)
        header = marker_header(batch)
        assert header.is_control and header.is_transactional and header.producer_id == 7
        assert header.producer_epoch == 3 and header.base_sequence == -1
        assert marker_type(batch, header) == kind
        assert list(iter_batches(batch))  # the CRC holds


def test_open_commit_abort_lso_and_reload(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "index")
    txns = PartitionTxns(index)
    _index(txns, index, _data_batch(0, 0, 2, transactional=False))  # 0-1 plain
    _index(txns, index, _data_batch(1, 2, 3))  # 2-4 pid 1
    _index(txns, index, _data_batch(2, 5, 1))  # 5 pid 2
    assert txns.last_stable_offset("t", 0, 6) == 2
    _index(txns, index, _marker(1, 6, commit=False))  # pid 1 aborted at 6
    assert txns.last_stable_offset("t", 0, 7) == 5
    _index(txns, index, _data_batch(1, 7, 1))  # pid 1 opens again at 7
    _index(txns, index, _marker(2, 8, commit=True))
    assert txns.last_stable_offset("t", 0, 9) == 7
    assert txns.aborted("t", 0, 0, 9) == [AbortedTxn(1, 2, 6)]
    assert txns.aborted("t", 0, 7, 9) == []  # ended before the fetch offset
    assert txns.aborted("t", 0, 0, 2) == []  # starts at the upper bound
    assert txns.open_transactions("t", 0) == {1: 7}
    reloaded = PartitionTxns(index)
    assert reloaded.last_stable_offset("t", 0, 9) == 7
    assert reloaded.aborted("t", 0, 0, 9) == [AbortedTxn(1, 2, 6)]
    reloaded.trim("t", 0, 7)
    assert reloaded.aborted("t", 0, 0, 9) == []
    assert PartitionTxns(index).aborted("t", 0, 0, 9) == []
    index.close()
