"""A consume-transform-produce application, run as its own process by the tests:
reads ``in`` as group ``ctp``, writes ``out-<value>`` to ``out`` and commits its input
offsets in the same transaction (``send_offsets_to_transaction``). Any error starts a
new incarnation (new consumer, new producer with the same transactional id, which
fences and aborts the previous one), as a real exactly-once application does. Runs
until killed, or until every input record up to ``--end`` per partition is committed."""

from __future__ import annotations

import argparse
import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def _debug() -> dict[str, str]:
    """``CTP_DEBUG=eos,cgrp`` turns librdkafka's debug log on (into the app's log).

    Re-bootstrapping is off: with the one broker gone, librdkafka 2.16 decommissions its
    handle but keeps it cached as group coordinator, and ``send_offsets_to_transaction``
    then waits for a state change that never comes (librdkafka issue #5511)."""
    conf = {"metadata.recovery.strategy": "none"}
    flags = os.environ.get("CTP_DEBUG")
    if flags:
        conf["debug"] = flags
    return conf


def incarnation(bootstrap: str, partitions: int, end: int, batch: int, pause_s: float) -> bool:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "ctp", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "session.timeout.ms": 6000, **_debug(),
    })
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": "ctp-app", "linger.ms": 5,
        **_debug(),
    })
    try:
        producer.init_transactions(30)
        consumer.subscribe(["in"])
        while True:
            msgs = consumer.consume(batch, 0.5)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                committed = consumer.committed([TopicPartition("in", p) for p in range(partitions)], 10)
                if all(tp.offset >= end for tp in committed):
                    return True
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce("out", b"out-" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
            print(f"committed {len(msgs)}", flush=True)
            time.sleep(pause_s)
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--end", type=int, required=True)
    parser.add_argument("--batch", type=int, default=50)
    # a pause between transactions keeps the application mid-work when a test kills
    parser.add_argument("--pause-ms", type=int, default=0)
    args = parser.parse_args()
    while True:
        try:
            if incarnation(args.bootstrap, args.partitions, args.end, args.batch, args.pause_ms / 1000):
                print("done", flush=True)
                return
        except KafkaException as exc:
            print(f"new incarnation after {exc!r}", flush=True)
            time.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - the test reads the log
            print(f"new incarnation after {exc!r}", file=sys.stderr, flush=True)
            time.sleep(0.5)


if __name__ == "__main__":
    main()
