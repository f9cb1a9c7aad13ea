"""The longest produce ack gap on a small topic while very large topics exist (issue 35,
items 9 and 10): a `tidegate serve` process with ``--topics`` topics of ``--partitions``
partitions each (time retention, so the controller's retention round covers them), and
one acks=all producer sending a record every ``--interval-ms`` to a one-partition topic
for ``--seconds``. Reports the longest time between two delivery reports and the
slowest single ack, beside the goal (100 ms). With ``--delete``, the large topics are
deleted (DeleteTopics, one each) half-way through the probe, so its gaps include the
deletions. Last line: ``RESULT {json}``.

    python -m bench.large_topics --topics 4 --partitions 10000 --seconds 300 [--delete]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import systems

GOAL_MS = 100.0


def _create_topics(bootstrap: str, count: int, partitions: int, timeout_s: float) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    for i in range(count):  # one at a time: each is large admin work of its own
        topic = NewTopic(f"large-{i}", partitions, 1, config={"retention.ms": "600000"})
        futures = admin.create_topics([topic], request_timeout=timeout_s, operation_timeout=timeout_s)
        for future in futures.values():
            future.result(timeout=timeout_s)
    return time.monotonic() - started


def _probe(bootstrap: str, seconds: float, interval_ms: int) -> dict[str, float]:
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
        "enable.idempotence": True,
    })
    acked: list[float] = []
    slowest = [0.0]
    failures = [0]

    def report(err: KafkaError | None, _msg: Any, sent: float) -> None:
        now = time.monotonic()
        if err is not None:
            failures[0] += 1
            return
        acked.append(now)
        slowest[0] = max(slowest[0], now - sent)

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sent = time.monotonic()
        producer.produce("probe", b"x" * 100,
                         on_delivery=lambda err, msg, sent=sent: report(err, msg, sent))
        producer.poll(interval_ms / 1000)
    producer.flush(30)
    gaps = [b - a for a, b in zip(acked, acked[1:], strict=False)]
    return {
        "acks": len(acked),
        "failed": failures[0],
        "longest_ack_gap_ms": round(max(gaps, default=0.0) * 1000, 1),
        "slowest_ack_ms": round(slowest[0] * 1000, 1),
    }


def _delete_topics(bootstrap: str, count: int, timeout_s: float) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    for i in range(count):
        for future in admin.delete_topics([f"large-{i}"], request_timeout=timeout_s,
                                          operation_timeout=timeout_s).values():
            future.result(timeout=timeout_s)
    return time.monotonic() - started


def run(topics: int, partitions: int, seconds: float, interval_ms: int,
        retention_period_ms: int, log_dir: Path, delete: bool = False) -> dict[str, float]:
    out: dict[str, float] = {"goal_longest_ack_gap_ms": GOAL_MS}
    with tempfile.TemporaryDirectory(prefix="tidegate-large-") as tmp:
        config = Path(tmp) / "tidegate.toml"
        config.write_text(f"[controller]\nretention_period_ms = {retention_period_ms}\n")
        server = systems.tidegate_server(Path(tmp) / "data", log_dir, config)
        server.start(ready_timeout_s=60)
        try:
            out["create_s"] = round(_create_topics(server.bootstrap, topics, partitions, 600), 1)
            probed: dict[str, float] = {}

            def probing() -> None:
                probed.update(_probe(server.bootstrap, seconds, interval_ms))

            probe = threading.Thread(target=probing)
            probe.start()
            if delete:
                time.sleep(seconds / 2)
                out["delete_s"] = round(_delete_topics(server.bootstrap, topics, 600), 1)
            probe.join()
            out.update(probed)
        finally:
            server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--interval-ms", type=int, default=10)
    parser.add_argument("--retention-period-ms", type=int, default=60_000,
                        help="the controller's retention round ([controller] retention_period_ms)")
    parser.add_argument("--log-dir", type=Path, default=Path("bench/results/logs"))
    parser.add_argument("--delete", action="store_true",
                        help="delete the large topics half-way through the probe")
    args = parser.parse_args()
    result = run(args.topics, args.partitions, args.seconds, args.interval_ms,
                 args.retention_period_ms, args.log_dir, args.delete)
    for key, value in result.items():
        print(f"{key}: {value}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
