"""Prometheus series of the fetch session cache (Kafka's ``FetchSessionCache`` metrics
under tidegate's names), served with the node's other metrics:

- ``tidegate_fetch_sessions``: sessions cached (Kafka: NumIncrementalFetchSessions);
- ``tidegate_fetch_session_partitions``: partitions they hold
  (NumIncrementalFetchPartitionsCached);
- ``tidegate_fetch_session_evictions_total`` (IncrementalFetchSessionEvictionsPerSec);
- ``tidegate_fetch_requests_total{kind}``: fetches by kind: ``full`` (may open a
  session), ``incremental``, ``sessionless`` (epoch -1, librdkafka's way) and
  ``session_error`` (unknown session, wrong epoch).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tidegate.gateway.fetch.sessions import FetchSessionCache


class FetchSessionCollector(Collector):
    def __init__(self, cache: FetchSessionCache | None) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        cache = self.cache
        if cache is None:
            return
        yield GaugeMetricFamily("tidegate_fetch_sessions", "Incremental fetch sessions cached",
                                value=len(cache.sessions))
        yield GaugeMetricFamily("tidegate_fetch_session_partitions",
                                "Partitions held by the cached fetch sessions",
                                value=cache.partitions)
        yield CounterMetricFamily("tidegate_fetch_session_evictions",
                                  "Fetch sessions evicted to make room",
                                  value=cache.counts.evictions)
        requests = CounterMetricFamily("tidegate_fetch_requests", "Fetch requests by kind",
                                       labels=["kind"])
        c = cache.counts
        for kind, value in (("full", c.full), ("incremental", c.incremental),
                            ("sessionless", c.sessionless), ("session_error", c.errors)):
            requests.add_metric([kind], value)
        yield requests
