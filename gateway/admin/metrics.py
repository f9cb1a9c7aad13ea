"""Prometheus metrics of one node, served as text at the admin REST API's ``/metrics``.

- ``tidegate_request_seconds{api}``: a Kafka request from its whole frame being read to
  its answer being handed to the socket (acks=0 produce: to the handler's end). The
  server's share of what a client measures; the rest is the network and the client.
- ``tidegate_tier1_write_sync_seconds{container}``: each batch a Tier-1 log wrote and
  ``fdatasync``ed (the disk's share of an acknowledged produce).
- Gauges read from the segment store at scrape time: cache bytes (used, bound, not yet
  in Tier-2), and per container its writer's lag and Tier-2 writes.
- ``process_*``, ``python_info``, ``python_gc_*``: prometheus_client's process, platform
  and GC collectors.
- kafka_exporter's series and per-topic bytes and records in and out:
  ``gateway/admin/kafka_exporter.py``.
- Scaling and retention of the topics (epochs, segments, per-segment and per-partition
  rates, scale events, truncations): ``gateway/admin/scaling_metrics.py``, gathered by
  ``refresh()`` before each scrape.

Each ``Metrics`` has its own registry, so several gateways in one process (tests) do
not share figures.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from tidegate.core.segmentstore.api import LATENCY_BOUNDS_S, LatencyCounts

#: The media type of the text format ``generate_latest`` writes.
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self, store: object) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Histogram(
            "tidegate_request_seconds",
            "Kafka requests: whole frame read to answer handed to the socket",
            ["api"],
            buckets=LATENCY_BOUNDS_S,
            registry=self.registry,
        )
        self._by_api: dict[str, Histogram] = {}
        self.registry.register(_StoreCollector(store))
        # The default registry's process, platform and GC series (dashboards read them).
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._refreshers: list[Callable[[], Awaitable[None]]] = []

    def add_collector(
        self, collector: Collector, refresh: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Serve ``collector`` too; ``refresh`` (if any) runs before each render."""
        self.registry.register(collector)
        if refresh is not None:
            self._refreshers.append(refresh)

    async def refresh(self) -> None:
        """Gather the figures that take async calls (call before ``render``)."""
        for refresh in self._refreshers:
            await refresh()

    def observe_request(self, api: str, seconds: float) -> None:
        child = self._by_api.get(api)
        if child is None:
            child = self._by_api[api] = self._requests.labels(api=api)
        child.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StoreCollector(Collector):
    """Reads what a ``StreamSegmentStore`` has (``containers``, ``stats()``); another
    store exports what it has of them."""

    def __init__(self, store: object) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        containers: Mapping[int, object] = getattr(self._store, "containers", {})
        sync = HistogramMetricFamily(
            "tidegate_tier1_write_sync",
            "Tier-1 batches: pwritev + fdatasync, per container",
            labels=["container"],
            unit="seconds",
        )
        for cid, c in sorted(containers.items()):
            counts = getattr(getattr(c, "log", None), "write_sync_seconds", None)
            if isinstance(counts, LatencyCounts):
                cumulative = counts.cumulative()
                sync.add_metric(
                    [str(cid)],
                    [(floatToGoString(bound), n) for bound, n in cumulative],
                    counts.sum_s,
                )
        yield sync
        # JSON-like: counts and bounds, and a dict per container.
        stats_of: Callable[[], dict[str, Any]] | None = getattr(self._store, "stats", None)
        if stats_of is None:
            return
        stats = stats_of()
        for key, doc in (
            ("cache_bytes", "bytes held by the segment store's cache"),
            ("cache_bytes_max", "the cache's bound"),
            ("cache_unflushed_bytes", "cached bytes not yet in Tier-2"),
        ):
            yield GaugeMetricFamily(f"tidegate_{key}", doc, value=stats[key])
        lag = GaugeMetricFamily(
            "tidegate_writer_lag_bytes",
            "bytes the storage writer has yet to move to Tier-2",
            labels=["container"],
        )
        writes = CounterMetricFamily(
            "tidegate_tier2_writes",
            "durable Tier-2 writes of the storage writer",
            labels=["container"],
        )
        for cid, c in stats["containers"].items():
            lag.add_metric([str(cid)], c["writer_lag_bytes"])
            writes.add_metric([str(cid)], c["tier2_writes"])
        yield lag
        yield writes
