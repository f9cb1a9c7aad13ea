"""Cleaning throughput of compacted topics, and produce latency while the cleaner runs.

`python -m bench.compaction`: one `tidegate serve` (cleaner every second), a
single-partition compacted topic, a confluent-kafka producer writing RECORDS records of
VALUE_BYTES over KEYS keys (acks=all) while the cleaner runs. Reported: the cleaner's
MB/s (bytes its passes read over their time, from its log lines), the produce p50/p99
(send to delivery report) and the partition's records left after the last pass;
`--no-cleaner` gives the same producer's figures without the cleaner.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.systems import tidegate_server

TOPIC = "bench-compacted"
#: The workload name in `make bench`'s results.
WORKLOAD = "compaction-1024B-p1"
_PASS = re.compile(r"cleaned \S+ below offset (\d+): (\d+) bytes read in ([\d.]+) s")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def run(records: int, keys: int, value_bytes: int, settle_s: float,
        backoff_ms: int = 1000, work_dir: Path | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-compaction-", dir=work_dir) as tmp:
        base = Path(tmp)
        config = base / "tidegate.toml"
        config.write_text(f'"log.cleaner.backoff.ms" = {backoff_ms}\n')
        server = tidegate_server(base / "data", base, config)
        server.start(ready_timeout_s=60)
        try:
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1, config={
                "cleanup.policy": "compact", "segment.ms": "200",
                "min.cleanable.dirty.ratio": "0.3"})])[TOPIC].result(timeout=30)
            latencies_ms: list[float] = []
            producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all",
                                 "linger.ms": 5, "queue.buffering.max.messages": 100_000})
            value = b"v" * value_bytes
            t0 = time.monotonic()
            for i in range(records):
                sent = time.monotonic()

                def done(err: object, _msg: object, sent: float = sent) -> None:
                    assert err is None, err
                    latencies_ms.append((time.monotonic() - sent) * 1000)

                while True:
                    try:
                        producer.produce(TOPIC, key=b"key-%d" % (i % keys), value=value,
                                         on_delivery=done)
                        break
                    except BufferError:
                        producer.poll(0.01)
                producer.poll(0)
            producer.flush(60)
            produce_s = time.monotonic() - t0
            time.sleep(settle_s)  # passes over the last dirty data
            text = server.log_path.read_text(errors="replace")
            passes = [(int(b), float(s)) for _, b, s in _PASS.findall(text)]
            c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "bench"})
            tp = TopicPartition(TOPIC, 0, 0)
            c.assign([tp])
            _, high = c.get_watermark_offsets(tp, timeout=30)
            left = 0
            while c.position([tp])[0].offset < high:
                left += sum(1 for m in c.consume(1000, 1.0) if m.error() is None)
            c.close()
        finally:
            server.stop()
    read = sum(b for b, _ in passes)
    seconds = sum(s for _, s in passes)
    return {
        "produce_mb_s": records * value_bytes / produce_s / 1e6,
        "produce_p50_ms": _percentile(latencies_ms, 0.50),
        "produce_p99_ms": _percentile(latencies_ms, 0.99),
        "cleaner_passes": len(passes),
        "cleaner_mb_read": read / 1e6,
        "cleaning_mb_s": read / seconds / 1e6 if seconds else 0.0,
        "records_left": left,
        "records": records,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--keys", type=int, default=5_000)
    p.add_argument("--value-bytes", type=int, default=1000)
    p.add_argument("--settle-s", type=float, default=6.0)
    p.add_argument("--no-cleaner", action="store_true", help="the same run, cleaner off")
    a = p.parse_args()
    backoff_ms = 0 if a.no_cleaner else 1000
    for name, value in run(a.records, a.keys, a.value_bytes, a.settle_s, backoff_ms).items():
        print(f"{name}: {value:.2f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
