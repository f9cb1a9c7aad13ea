"""kafka-clients 4.3.0 (Java) on a compacted topic against ``tidegate serve`` (cleaner
every 200 ms): keyed updates and tombstones from an lz4 idempotent producer, a keyless
record refused with InvalidRecordException (in a batch of three, that record only:
ProduceResponse's record errors), and after cleaning a consumer reads the
latest value of every key at its original offset."""

from __future__ import annotations

import time
from pathlib import Path

from tests.compaction.conftest import serve
from tests.java.conftest import Java

TIMEOUT_S = 30


def _lines(out: str, tag: str) -> dict[int, tuple[str, str]]:
    return {int(o): (k, v) for t, o, k, v in
            (line.split(" ", 3) for line in out.splitlines() if line.startswith(tag + " "))}


def test_java_compacted_topic(java: Java, tmp_path: Path) -> None:
    server = serve(tmp_path)
    server.start()
    try:
        out = java.run("CompactedScenario", server.bootstrap, "jc", "produce", "5")
        assert "OK produce" in out and "OK keyless-refused" in out, out
        assert "Compacted topic cannot accept message without key" in out, out
        # The batch with one keyless record in three: only that record is INVALID_RECORD.
        assert "record-errors KafkaException InvalidRecordException KafkaException" in out, out
        assert "record error: Compacted topic cannot accept message without key in topic partition jc-0\n" in out, out
        produced = _lines(out, "P")
        assert sorted(produced) == list(range(53))
        log = tmp_path / "tidegate.log"
        deadline = time.monotonic() + TIMEOUT_S
        while "cleaned jc/0" not in log.read_text():
            assert time.monotonic() < deadline, server.tail()
            time.sleep(0.2)
        read = _lines(java.run("CompactedScenario", server.bootstrap, "jc", "consume"), "C")
        for o, rec in read.items():
            assert produced[o] == rec, o
        head = max(produced)
        latest = {k: o for o, (k, _) in sorted(produced.items()) if o != head}
        assert set(latest.values()) | {head} <= set(read)
        assert len(read) == len(latest) + 1
        assert read[51] == ("k2", "null")  # tombstones stay for delete.retention.ms
    finally:
        server.close()
