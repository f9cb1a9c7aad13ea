"""Auto-scaling seen through Kafka (issue 30), on a real ``tidegate serve`` with short
policy periods and confluent-kafka clients: segments are split only between partitions
and where the traffic divides, a hot partition ends up alone and then scaling stops,
cold partitions merge back into balanced segments, and no record is lost or duplicated
on the way."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.autoscale_load import (
    create_topic,
    epochs,
    metrics,
    partitions_of,
    produce,
    read_back,
    start_server,
    wait_until,
)
from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(120)

#: KB/s per segment; hot partitions get 150 KB/s, cold ones 3 KB/s.
TARGET = 40
HOT, COLD = 150, 3


#: Rates over 4 s (and 0.8 s), a 2 s cooldown: a rate stays high for seconds after the
#: load stops, well past the cooldown of the segments split just before.
SLOW_WINDOW = """
[controller]
autoscale_period_ms = 200
autoscale_cooldown_ms = 2000
[store]
traffic_window_ms = 4000
"""


def scaling(min_segments: int = 1) -> dict[str, str]:
    return {
        "tidegate.scaling.type": "BY_RATE_IN_KBYTES_PER_SEC",
        "tidegate.scaling.target.rate": str(TARGET),
        "tidegate.scaling.scale.factor": "2",
        "tidegate.scaling.min.segments": str(min_segments),
    }


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    s = start_server(tmp_path)
    try:
        yield s
    finally:
        s.close()


def test_hot_partition_of_two_is_split_off_once(server: Tidegate) -> None:
    """The issue's reproduction: a 2-partition topic, 1 s cooldown, load on one
    partition. One split parts the two partitions; the segment holding the hot one alone
    is never split again, however long the load lasts."""
    create_topic(server.bootstrap, "two", 2, scaling())
    assert epochs(server, "two") == [[(0.0, 1.0)]]
    sent = produce(server.bootstrap, "two", {0: HOT}, seconds=8)
    busy = metrics(server)
    assert busy[("tidegate_partition_bytes_per_second", (("partition", "0"), ("topic", "two")))] > (
        TARGET * 1024
    )
    assert busy[("tidegate_partition_bytes_per_second", (("partition", "1"), ("topic", "two")))] == 0
    history = epochs(server, "two")
    assert history == [[(0.0, 1.0)], [(0.0, 0.25), (0.25, 1.0)]], history
    wait_until(lambda: len(epochs(server, "two")) == 3, 20, "the idle halves to merge")
    time.sleep(2)
    assert epochs(server, "two")[-1] == [(0.0, 1.0)]
    assert len(epochs(server, "two")) == 3
    read_back(server.bootstrap, "two", sent)
    log = server.tail(400)
    assert "splitting hot segments (rate > target 40 KB/s)" in log
    assert "merging cold neighbours" in log
    m = metrics(server)
    topic = (("topic", "two"),)
    assert m[("tidegate_topic_epochs", topic)] == 3
    assert m[("tidegate_topic_segments", topic)] == 1
    assert m[("tidegate_scale_events_total", (("kind", "split"), *topic))] == 1
    assert m[("tidegate_scale_events_total", (("kind", "merge"), *topic))] == 1
    assert ("tidegate_scale_events_total", (("kind", "manual"), *topic)) not in m
    [rate] = [
        v for (name, labels), v in m.items()
        if name == "tidegate_segment_bytes_per_second" and ("topic", "two") in labels
    ]
    assert rate >= 0
    assert m[("tidegate_partition_bytes_per_second", (("partition", "0"), *topic))] >= 0


def test_two_hot_of_eight_get_their_own_segments_then_merge_back(server: Tidegate) -> None:
    """8 partitions starting in 2 segments, partitions 2 and 6 (neighbours in the key
    space, both in the first segment) hot: splits until each is alone, then no more
    epochs under steady load; all cold again, the segments merge back to 4 + 4 while
    records keep coming."""
    create_topic(server.bootstrap, "eight", 8, scaling(min_segments=2))
    first = epochs(server, "eight")
    assert [partitions_of(e, 8) for e in first] == [[[0, 2, 4, 6], [1, 3, 5, 7]]]
    load = {p: COLD for p in range(8)} | {2: HOT, 6: HOT}
    sent: Counter[int] = Counter()
    deadline = time.monotonic() + 40
    while True:
        sent = produce(server.bootstrap, "eight", load, seconds=2, sent_before=sent)
        held = partitions_of(epochs(server, "eight")[-1], 8)
        if [2] in held and [6] in held:
            break
        assert time.monotonic() < deadline, epochs(server, "eight")
    settled = epochs(server, "eight")
    sent = produce(server.bootstrap, "eight", load, seconds=5, sent_before=sent)
    history = epochs(server, "eight")
    assert history == settled, "scaling went on after the hot partitions were alone"
    assert len(history) <= 4, history
    for e in history:
        assert all(partitions_of(e, 8)), f"a segment without a partition: {e}"
    # all cold (a trickle goes on through the merges): cold neighbours merge, the
    # smallest pairs first, back to min.segments
    trickle = {p: COLD for p in range(8)}
    sent = produce(server.bootstrap, "eight", trickle, seconds=30, sent_before=sent,
                   until=lambda: len(epochs(server, "eight")[-1]) == 2)
    assert len(epochs(server, "eight")[-1]) == 2, "no merge back to 2 segments"
    sent = produce(server.bootstrap, "eight", trickle, seconds=2, sent_before=sent)
    final = epochs(server, "eight")[-1]
    assert [len(held) for held in partitions_of(final, 8)] == [4, 4], [
        partitions_of(e, 8) for e in epochs(server, "eight")
    ]
    read_back(server.bootstrap, "eight", sent)


def test_one_partition_topic_never_scales(server: Tidegate) -> None:
    create_topic(server.bootstrap, "one", 1, scaling())
    sent = produce(server.bootstrap, "one", {0: HOT}, seconds=5)
    assert epochs(server, "one") == [[(0.0, 1.0)]]
    read_back(server.bootstrap, "one", sent)


def test_no_split_on_a_rate_falling_fast(tmp_path: Path) -> None:
    """The load stops right after a split, while the new segments are in their
    cooldown; when it ends the long window still shows them far above the target, the
    short one idle: nothing more is split (only merged back once cold)."""
    s = start_server(tmp_path, SLOW_WINDOW)
    try:
        create_topic(s.bootstrap, "burst", 4, scaling())
        load = {p: HOT for p in range(4)}
        sent = produce(s.bootstrap, "burst", load, seconds=30,
                       until=lambda: len(epochs(s, "burst")) > 1)
        assert len(epochs(s, "burst")) == 2, "no split under load"
        wait_until(lambda: len(epochs(s, "burst")[-1]) == 1, 20, "the merge back")
        time.sleep(1)
        m = metrics(s)
        topic = (("topic", "burst"),)
        assert m[("tidegate_scale_events_total", (("kind", "split"), *topic))] == 1
        assert len(epochs(s, "burst")) == 3, epochs(s, "burst")
        read_back(s.bootstrap, "burst", sent)
    finally:
        s.close()


def test_shared_segments_across_kill_9_with_kafka_python(server: Tidegate) -> None:
    """6 partitions in 2 segments (a scaling topic below its target): kafka-python
    produces to every partition, tidegate is killed with -9 and restarted (the offset
    index is rebuilt from segments holding 3 partitions each), and a kafka-python
    consumer group reads every record back, dense per partition, in order."""
    from kafka import KafkaConsumer, KafkaProducer

    configs = scaling(min_segments=2) | {"tidegate.scaling.target.rate": "100000"}
    create_topic(server.bootstrap, "shared", 6, configs)
    [first] = epochs(server, "shared")
    assert [len(held) for held in partitions_of(first, 6)] == [3, 3]
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=2)
    futures = [
        producer.send("shared", key=b"%d-%d" % (n % 6, n // 6), value=b"x" * 100, partition=n % 6)
        for n in range(6 * 300)
    ]
    producer.flush(30)
    assert [f.get(10).offset for f in futures[:6]] == [0] * 6
    producer.close()
    server.kill9()
    server.start()
    consumer = KafkaConsumer(
        "shared", bootstrap_servers=server.bootstrap, group_id="shared-readers",
        auto_offset_reset="earliest", enable_auto_commit=False,
    )
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(6)}
    deadline = time.monotonic() + 60
    try:
        while sum(len(v) for v in got.values()) < 6 * 300:
            assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [(m.offset, m.key) for m in msgs]
    finally:
        consumer.close()
    for p, records in got.items():
        assert [o for o, _ in records] == list(range(300)), p
        assert [k for _, k in records] == [b"%d-%d" % (p, n) for n in range(300)], p
    assert epochs(server, "shared") == [first]
