"""Transactions in a compacted topic, cleaned as Kafka's cleaner cleans them: confluent-kafka
transactional producers commit and abort; the cleaner (in process, the clock passed in)
removes aborted records at once, keeps their abort marker until a later pass past its
delete horizon, keeps a commit marker while any record of its transaction is left, never
cleans from an open transaction on; read_committed and read_uncommitted consumers see
what Kafka would show them. Tombstones' delete horizon counts from the pass that first
saw them, not from their timestamp."""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tidegate.gateway.log.compaction.cleaner import LogCleaner

from tests.clients.server import Tidegate
from tests.compaction.test_cleaner import COMPACT, DAY_MS, TIMEOUT_S, consume, create, ctx_of
from tests.gateway.conftest import Node
from tests.txn.helpers import read_all


def txn_cleaner(node: Node, clock_ms: Any) -> LogCleaner:
    ctx = ctx_of(node)
    return LogCleaner(ctx.topics, ctx.logs, ctx.index, ctx.store, backoff_ms=0,
                      clock_ms=clock_ms, txns=ctx.partition_txns)


def bases(node: Node, topic: str) -> list[int]:
    return [e.base_offset for e in ctx_of(node).index.entries_from(topic, 0, 0)]


class Writer:
    """One batch per record: a plain producer and a transactional one."""

    def __init__(self, node: Node, topic: str) -> None:
        conf = {"bootstrap.servers": f"127.0.0.1:{node.port}", "linger.ms": 0}
        self.topic = topic
        self.plain = Producer(conf)
        self.txn = Producer({**conf, "transactional.id": f"tx-{topic}"})
        self.txn.init_transactions(TIMEOUT_S)

    def put(self, items: list[tuple[bytes, bytes | None]], p: Producer | None = None) -> None:
        p = p or self.plain
        for key, value in items:
            p.produce(self.topic, key=key, value=value)
            assert p.flush(TIMEOUT_S) == 0

    def transaction(self, items: list[tuple[bytes, bytes | None]], commit: bool) -> None:
        self.txn.begin_transaction()
        self.put(items, self.txn)
        if commit:
            self.txn.commit_transaction(TIMEOUT_S)
        else:
            self.txn.abort_transaction(TIMEOUT_S)


def values(node: Node, topic: str, committed: bool) -> list[bytes]:
    return read_all(f"127.0.0.1:{node.port}", topic, 1, committed=committed)


async def test_aborted_records_and_markers_are_cleaned_as_kafka_does(node: Node) -> None:
    topic = "txc"
    await asyncio.to_thread(create, node, topic, COMPACT)
    w = await asyncio.to_thread(Writer, node, topic)
    await asyncio.to_thread(w.transaction, [(b"k1", b"a1"), (b"k2", b"a2")], True)  # 0 1, marker 2
    await asyncio.to_thread(w.put, [(b"k2", b"c2")])  # 3
    await asyncio.to_thread(w.transaction, [(b"k1", b"b1"), (b"k3", b"b3")], False)  # 4 5, 6
    await asyncio.to_thread(w.transaction, [(b"k4", b"d4")], True)  # 7, marker 8
    await asyncio.to_thread(w.put, [(b"k9", b"z")])  # 9: the head
    assert bases(node, topic) == list(range(10))
    assert await asyncio.to_thread(values, node, topic, False) == [
        b"a1", b"a2", b"c2", b"b1", b"b3", b"d4", b"z"]
    assert await asyncio.to_thread(values, node, topic, True) == [b"a1", b"a2", b"c2", b"d4", b"z"]
    txns = ctx_of(node).partition_txns
    assert txns is not None and len(txns.aborted(topic, 0, 0, 100)) == 1
    now = int(time.time() * 1000)

    # Pass 1: aborted records go at once and never entered the key map (k1's committed
    # a1 stays); their abort marker stays until the next pass past its horizon.
    assert await txn_cleaner(node, lambda: now + 1000).run_once() == 1
    assert bases(node, topic) == [0, 2, 3, 6, 7, 8, 9]
    expect = [b"a1", b"c2", b"d4", b"z"]
    assert await asyncio.to_thread(values, node, topic, False) == expect
    assert await asyncio.to_thread(values, node, topic, True) == expect
    assert [(o, k) for o, k, _ in await asyncio.to_thread(consume, node, topic, 10)] == [
        (0, b"k1"), (3, b"k2"), (7, b"k4"), (9, b"k9")]

    # Pass 2, a day later (nothing dirty; the marker is due): the abort marker goes and
    # its transaction leaves the aborted list with it. Commit markers stay: records of
    # their transactions are left.
    assert await txn_cleaner(node, lambda: now + DAY_MS + 2000).run_once() == 1
    assert bases(node, topic) == [0, 2, 3, 7, 8, 9]
    assert txns.aborted(topic, 0, 0, 100) == []
    assert await asyncio.to_thread(values, node, topic, True) == expect

    # Pass 3: the committed records are superseded; their commit markers, read in the
    # same pass as those records, stay once more (as in Kafka).
    await asyncio.to_thread(w.put, [(b"k1", b"n1"), (b"k4", b"n4"), (b"k9", b"z2")])  # 10-12
    assert await txn_cleaner(node, lambda: now + DAY_MS + 3000).run_once() == 1
    assert bases(node, topic) == [2, 3, 8, 9, 10, 11, 12]
    # Pass 4, past the markers' horizon, with something dirty: they go.
    await asyncio.to_thread(w.put, [(b"k5", b"v5"), (b"k9", b"z3")])  # 13 14
    assert await txn_cleaner(node, lambda: now + 2 * DAY_MS + 4000).run_once() == 1
    assert bases(node, topic) == [3, 10, 11, 12, 13, 14]
    final = [b"c2", b"n1", b"n4", b"z2", b"v5", b"z3"]
    assert await asyncio.to_thread(values, node, topic, True) == final
    assert await asyncio.to_thread(values, node, topic, False) == final
    # A later transaction of the same producer reads as committed.
    await asyncio.to_thread(w.transaction, [(b"k6", b"t6")], True)
    assert await asyncio.to_thread(values, node, topic, True) == [*final, b"t6"]


async def test_an_open_transaction_is_never_cleaned(node: Node) -> None:
    topic = "txo"
    await asyncio.to_thread(create, node, topic, COMPACT)
    w = await asyncio.to_thread(Writer, node, topic)
    await asyncio.to_thread(w.put, [(b"k1", b"v0"), (b"k1", b"v1")])  # 0 1
    await asyncio.to_thread(w.txn.begin_transaction)
    await asyncio.to_thread(w.put, [(b"k1", b"open")], w.txn)  # 2: the last stable offset
    await asyncio.to_thread(w.put, [(b"k1", b"v3"), (b"k1", b"v4"), (b"k2", b"x")])  # 3-5
    now = int(time.time() * 1000)
    c = txn_cleaner(node, lambda: now + 1000)
    assert await c.run_once() == 1
    cp = c.checkpoint(topic, 0)
    assert cp is not None and cp.end_offset == 2  # up to the last stable offset only
    assert bases(node, topic) == [1, 2, 3, 4, 5]
    await asyncio.to_thread(w.txn.commit_transaction, TIMEOUT_S)  # marker 6
    assert await asyncio.to_thread(values, node, topic, True) == [b"v1", b"open", b"v3", b"v4", b"x"]
    await asyncio.to_thread(w.put, [(b"k3", b"head")])  # 7
    assert await c.run_once() == 1
    assert bases(node, topic) == [4, 5, 6, 7]
    assert await asyncio.to_thread(values, node, topic, True) == [b"v4", b"x", b"head"]


async def test_tombstone_horizon_counts_from_the_first_clean(node: Node) -> None:
    """A tombstone stamped two days ago is kept delete.retention.ms after the pass that
    first cleaned it, not removed at once for its old timestamp."""
    topic = "old"
    await asyncio.to_thread(create, node, topic, COMPACT)
    now = int(time.time() * 1000)

    def put() -> None:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{node.port}", "linger.ms": 0})
        for key, value, ts in [(b"a", b"1", now), (b"a", None, now - 2 * DAY_MS),
                               (b"b", b"2", now)]:
            p.produce(topic, key=key, value=value, timestamp=ts)
            assert p.flush(TIMEOUT_S) == 0

    await asyncio.to_thread(put)
    c = txn_cleaner(node, lambda: now + 1000)
    assert await c.run_once() == 1
    assert [(o, k, v) for o, k, v in await asyncio.to_thread(consume, node, topic, 3)] == [
        (1, b"a", None), (2, b"b", b"2")]
    assert await txn_cleaner(node, lambda: now + DAY_MS).run_once() == 0  # not yet due
    assert await txn_cleaner(node, lambda: now + DAY_MS + 1000).run_once() == 1
    assert await asyncio.to_thread(consume, node, topic, 3) == [(2, b"b", b"2")]


def test_serve_cleans_aborted_transactions(tidegate: Tidegate) -> None:
    """``tidegate serve`` (cleaner every 200 ms, delete.retention.ms 300): aborted
    records vanish for read_uncommitted readers too, committed ones are compacted like
    others, and read_committed readers see the same before and after."""
    topic = "served-txn"
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={
            **COMPACT, "delete.retention.ms": "300"})]).values():
        f.result(timeout=TIMEOUT_S)
    server = types.SimpleNamespace(port=int(tidegate.bootstrap.rsplit(":", 1)[1]))
    w = Writer(server, topic)  # type: ignore[arg-type]
    w.transaction([(b"k1", b"a1"), (b"k2", b"a2")], True)
    w.transaction([(b"k1", b"b1"), (b"k3", b"b3")], False)
    w.put([(b"k2", b"c2")])
    w.transaction([(b"k4", b"d4")], True)
    committed = [b"a1", b"a2", b"c2", b"d4"]
    assert read_all(tidegate.bootstrap, topic, 1, committed=True) == committed
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        w.put([(b"tick", b"")])  # the head moves on: what was before it is cleanable
        seen = read_all(tidegate.bootstrap, topic, 1, committed=False)
        if b"b1" not in seen and b"a2" not in seen:
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"never cleaned: {seen}\n{tidegate.tail()}")
    assert [v for v in seen if v] == [b"a1", b"c2", b"d4"]
    assert [v for v in read_all(tidegate.bootstrap, topic, 1, committed=True) if v] == [
        b"a1", b"c2", b"d4"]
    w.transaction([(b"k5", b"e5")], True)
    assert [v for v in read_all(tidegate.bootstrap, topic, 1, committed=True) if v] == [
        b"a1", b"c2", b"d4", b"e5"]


async def test_a_commit_after_an_abort_supersedes_older_values(node: Node) -> None:
    """The key map follows the markers: a producer's committed transaction after its
    aborted one is mapped, so it supersedes the key's older values."""
    topic = "txm"
    await asyncio.to_thread(create, node, topic, COMPACT)
    w = await asyncio.to_thread(Writer, node, topic)
    await asyncio.to_thread(w.put, [(b"k1", b"v0")])  # 0
    await asyncio.to_thread(w.transaction, [(b"k1", b"x")], False)  # 1, marker 2
    await asyncio.to_thread(w.transaction, [(b"k1", b"y")], True)  # 3, marker 4
    await asyncio.to_thread(w.put, [(b"k9", b"head")])  # 5
    now = int(time.time() * 1000)
    assert await txn_cleaner(node, lambda: now + 1000).run_once() == 1
    assert bases(node, topic) == [2, 3, 4, 5]
    assert await asyncio.to_thread(values, node, topic, True) == [b"y", b"head"]
