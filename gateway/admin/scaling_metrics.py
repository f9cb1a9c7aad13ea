"""Scaling and retention of the topics, for ``/metrics`` (``gateway/admin/metrics.py``).

The figures come from the controller (epochs, segments: async calls) and are gathered
by ``ScalingMetrics.refresh`` before each scrape; the Prometheus collector then reads
that snapshot. Names:

- ``tidegate_topic_epochs{topic}``: epochs in the stream's history (1 + its scales);
- ``tidegate_topic_segments{topic}``: segments of the current epoch;
- ``tidegate_segment_bytes_per_second{topic,segment}`` and ``..._events_per_second``:
  each current segment's smoothed incoming traffic, as the segment store measures it;
- ``tidegate_partition_bytes_per_second{topic,partition}``: each partition's produce
  rate as the gateway measures it (what the auto-scaler splits by);
- ``tidegate_scale_events_total{topic,kind}``: scales since the node started, by kind
  (``split`` and ``merge`` by the auto-scaler, ``manual`` by an API call);
- ``tidegate_truncations_total{topic,reason}``: stream truncations since the node
  started, by reason (``retention`` by the retention policy, ``request`` by an API call
  such as DeleteRecords).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tidegate.core.controller.api import Controller, SegmentRecord, qualified_segment_name
from tidegate.core.segmentstore.api import SegmentTraffic


class ControllerCounts(Protocol):
    """What the controller counted (``core/controller/stats.py``)."""

    @property
    def scales(self) -> Mapping[tuple[str, str, str], int]: ...

    @property
    def truncations(self) -> Mapping[tuple[str, str, str], int]: ...


class PartitionRates(Protocol):
    def rates(self, topic: str, partition: int) -> tuple[float, float, float, float]: ...


@dataclass
class TopicScaling:
    topic: str
    epochs: int
    #: (segment id, bytes/s, events/s) of each current segment.
    segments: list[tuple[int, float, float]]
    #: bytes/s of each partition.
    partition_bytes_per_second: list[float] = field(default_factory=list)


class ScalingMetrics(Collector):
    def __init__(
        self,
        controller: Controller,
        scope: str,
        topics: Callable[[], Sequence[tuple[str, int]]],
        traffic: Callable[[str], SegmentTraffic],
        counts: ControllerCounts | None = None,
        partitions: PartitionRates | None = None,
    ) -> None:
        """``topics()`` lists (topic, partition count); ``traffic`` is the segment
        store's; ``counts`` the controller's counters when it runs in this process."""
        self.controller = controller
        self.scope = scope
        self.topics = topics
        self.traffic = traffic
        self.counts = counts
        self.partitions = partitions
        self._snapshot: list[TopicScaling] = []

    async def refresh(self) -> None:
        snapshot = []
        for topic, count in self.topics():
            try:
                epochs = await self.controller.get_epochs(self.scope, topic)
            except Exception:
                continue  # deleted meanwhile
            current: Sequence[SegmentRecord] = epochs[-1].segments if epochs else ()
            segments = []
            for s in current:
                t = self.traffic(qualified_segment_name(self.scope, topic, s.id))
                segments.append((s.id, t.bytes_per_second, t.events_per_second))
            rates = (
                [self.partitions.rates(topic, p)[0] for p in range(count)]
                if self.partitions is not None
                else []
            )
            snapshot.append(TopicScaling(topic, len(epochs), segments, rates))
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        epochs = GaugeMetricFamily(
            "tidegate_topic_epochs", "epochs in the topic stream's history", labels=["topic"]
        )
        segments = GaugeMetricFamily(
            "tidegate_topic_segments", "segments of the topic stream's current epoch",
            labels=["topic"],
        )
        seg_bytes = GaugeMetricFamily(
            "tidegate_segment_bytes_per_second",
            "smoothed incoming bytes/s of each current segment", labels=["topic", "segment"],
        )
        seg_events = GaugeMetricFamily(
            "tidegate_segment_events_per_second",
            "smoothed incoming events/s of each current segment", labels=["topic", "segment"],
        )
        part_bytes = GaugeMetricFamily(
            "tidegate_partition_bytes_per_second",
            "smoothed produce bytes/s of each partition (what the auto-scaler splits by)",
            labels=["topic", "partition"],
        )
        for t in self._snapshot:
            epochs.add_metric([t.topic], t.epochs)
            segments.add_metric([t.topic], len(t.segments))
            for seg, b, e in t.segments:
                seg_bytes.add_metric([t.topic, str(seg)], b)
                seg_events.add_metric([t.topic, str(seg)], e)
            for p, b in enumerate(t.partition_bytes_per_second):
                part_bytes.add_metric([t.topic, str(p)], b)
        yield from (epochs, segments, seg_bytes, seg_events, part_bytes)
        scales = CounterMetricFamily(
            "tidegate_scale_events", "scales of topic streams since the node started",
            labels=["topic", "kind"],
        )
        truncations = CounterMetricFamily(
            "tidegate_truncations", "truncations of topic streams since the node started",
            labels=["topic", "reason"],
        )
        if self.counts is not None:
            for (scope, stream, kind), n in sorted(self.counts.scales.items()):
                if scope == self.scope:
                    scales.add_metric([stream, kind], n)
            for (scope, stream, reason), n in sorted(self.counts.truncations.items()):
                if scope == self.scope:
                    truncations.add_metric([stream, reason], n)
        yield scales
        yield truncations
