"""A single-partition compacted topic used as Schema Registry uses ``_schemas``, against
``tidegate serve`` (file Tier-1 and Tier-2, cleaner every 200 ms): keyed updates and
tombstones from confluent-kafka; the cleaner runs; readers see the latest value of every
key at its original offset across a clean restart and ``kill -9`` during cleaning."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.server import Tidegate
from tests.compaction.conftest import serve

TIMEOUT_S = 30
TOPIC = "_schemas"


def _produce(server: Tidegate, items: list[tuple[bytes, bytes | None]]) -> list[int]:
    """Offsets of ``items`` as acknowledged (acks=all, idempotent)."""
    offsets: list[int] = [-1] * len(items)
    p = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True,
                  "linger.ms": 2})

    def done(i: int) -> object:
        def cb(err: object, msg: object) -> None:
            assert err is None, err
            offsets[i] = msg.offset()  # type: ignore[attr-defined]
        return cb

    for i, (k, v) in enumerate(items):
        p.produce(TOPIC, key=k, value=v, on_delivery=done(i))
        if i % 50 == 49:
            p.flush(TIMEOUT_S)
    assert p.flush(TIMEOUT_S) == 0
    return offsets


def _read_all(server: Tidegate) -> dict[int, tuple[bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "sr",
                  "enable.auto.commit": False})
    tp = TopicPartition(TOPIC, 0, 0)
    c.assign([tp])
    out: dict[int, tuple[bytes, bytes | None]] = {}
    _, high = c.get_watermark_offsets(tp, timeout=TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out[m.offset()] = (m.key(), m.value())
            if c.position([tp])[0].offset >= high:
                return out
    finally:
        c.close()
    raise AssertionError(f"read {len(out)} records up to {max(out, default=-1)} of {high}")


def _schema(subject: int, version: int) -> tuple[bytes, bytes]:
    key = json.dumps({"keytype": "SCHEMA", "subject": f"s{subject}", "version": 1,
                      "magic": 1}).encode()
    value = json.dumps({"subject": f"s{subject}", "version": version, "id": version,
                        "schema": '"string"' + " " * 200}).encode()
    return key, value


def _check(read: dict[int, tuple[bytes, bytes | None]],
           produced: dict[int, tuple[bytes, bytes | None]]) -> None:
    """Every record read is the one produced at that offset; the latest of every key is
    there; a record that is gone was superseded by a later one of its key."""
    latest: dict[bytes, int] = {}
    for o in sorted(produced):
        latest[produced[o][0]] = o
    for o, rec in read.items():
        assert produced[o] == rec, o
    for o in latest.values():
        assert o in read, f"latest record at {o} is missing"


def test_schemas_topic_survives_restarts_and_kill9_while_cleaning(tmp_path: Path) -> None:
    # Passes read slowly (about a second each here), so a kill lands inside one, and
    # switch the index in steps of 3 entries, so it may land between two steps.
    server = serve(tmp_path, '"log.cleaner.io.max.bytes.per.second" = 400000\n'
                             '"log.cleaner.switch.entries.max" = 3\n')
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={
            "cleanup.policy": "compact", "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01"})])[TOPIC].result(timeout=TIMEOUT_S)
        produced: dict[int, tuple[bytes, bytes | None]] = {}
        rng = random.Random(24)
        version = 0
        for round_ in range(4):
            items: list[tuple[bytes, bytes | None]] = []
            for _ in range(300):
                version += 1
                items.append(_schema(rng.randrange(20), version))
            items.append((_schema(round_, 0)[0], None))  # a subject deleted
            for o, item in zip(_produce(server, items), items, strict=True):
                produced[o] = item
            # The cleaner's passes run meanwhile; stop it at a random point of one.
            time.sleep(rng.uniform(0.2, 1.5))
            if round_ % 2:
                server.kill9()
            else:
                assert server.stop() == 0, server.tail()
            server.start()
            _check(_read_all(server), produced)
        log = tmp_path / "tidegate.log"
        # A pass after the last start that reached the last batches (the first one may
        # see only what was in Tier-2 then: the last round may still be in Tier-1).
        deadline = time.monotonic() + TIMEOUT_S
        last = max(produced)
        while not any(int(end) >= last - 60 for end in re.findall(
                r"cleaned _schemas/0 below offset (\d+)",
                log.read_text().rsplit("---- start", 1)[-1])):
            assert time.monotonic() < deadline, server.tail()
            time.sleep(0.2)
        final = _read_all(server)
        _check(final, produced)
        assert len(final) < len(produced) / 4, "the cleaner removed little"
    finally:
        server.close()
