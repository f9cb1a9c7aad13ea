"""tidegate's own view of a phase, from its ``/metrics`` (``gateway/admin/metrics.py``) read
before and after: quantiles of the histograms' growth in between.

A quantile is given as the upper bound of the bucket it falls in (``<=`` that many
seconds), as Prometheus' buckets allow; None where nothing was observed or the server
has no ``/metrics`` (a ``--compare`` commit from before it existed).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

#: (sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, timeout_s: float = 5.0) -> Samples | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def quantile_s(
    before: Samples | None,
    after: Samples | None,
    histogram: str,
    q: float,
    labels: Mapping[str, str] | None = None,
) -> float | None:
    """The bucket bound below which a share ``q`` of what ``histogram`` observed between
    the two scrapes lies, summed over every label set that has ``labels``."""
    if before is None or after is None:
        return None
    want = set((labels or {}).items())
    grown: dict[float, float] = {}
    for (name, pairs), value in after.items():
        if name != f"{histogram}_bucket" or not want <= set(pairs):
            continue
        bound = float(dict(pairs)["le"])
        grown[bound] = grown.get(bound, 0.0) + value - before.get((name, pairs), 0.0)
    if not grown:
        return None
    total = grown.get(float("inf"), max(grown.values()))
    if total <= 0:
        return None
    for bound in sorted(grown):
        if grown[bound] >= q * total:
            return bound
    return float("inf")
