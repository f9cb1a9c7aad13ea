"""Runs docs/spark.md's Python blocks as written (the quick start first, then the others in
its namespace) and waits until the quick start's query wrote the windows its input closes.

    python spark_quickstart.py BOOTSTRAP GRPC TMP_DIR EXPECTED_RESULTS DEADLINE_S

Prints one JSON line: the query's micro-batches (id, input rows, trigger time in ms) and the
results read back with read_committed. Exits non-zero when the deadline passes first.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.docs.examples import REPO, adapt, python_blocks  # noqa: E402


def _results(bootstrap: str, deadline: float) -> list[str]:
    """Every committed record of ``results`` (none while the topic does not exist)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "doc-quickstart-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    try:
        meta = consumer.list_topics("results", timeout=max(1.0, deadline - time.monotonic()))
        topic = meta.topics.get("results")
        if topic is None or topic.error is not None:
            return []
        consumer.assign([TopicPartition("results", p, 0) for p in topic.partitions])
        values: list[str] = []
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                return values
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(str(msg.error()))
            values.append(msg.value().decode())
        return values
    finally:
        consumer.close()


def main(bootstrap: str, grpc: str, tmp: str, expected: int, deadline_s: float) -> int:
    deadline = time.monotonic() + deadline_s
    quick, *others = python_blocks(REPO / "docs" / "spark.md")
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(adapt(quick.code, bootstrap, grpc, Path(tmp)), quick.name, "exec"), namespace)
    for block in others:
        exec(compile(adapt(block.code, bootstrap, grpc, Path(tmp)), block.name, "exec"), namespace)
    spark = namespace["spark"]
    (query,) = spark.streams.active  # type: ignore[attr-defined]
    results: list[str] = []
    try:
        while time.monotonic() < deadline:
            if query.exception() is not None:
                print(json.dumps({"error": str(query.exception())}), flush=True)
                return 2
            results = _results(bootstrap, deadline)
            if len(results) >= expected:
                break
            time.sleep(0.5)
        batches = [{"batch": p["batchId"], "rows": p["numInputRows"],
                    "trigger_ms": p["durationMs"].get("triggerExecution")} for p in query.recentProgress]
        print(json.dumps({"batches": batches, "results": results}), flush=True)
        return 0 if len(results) >= expected else 1
    finally:
        query.stop()
        spark.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))
