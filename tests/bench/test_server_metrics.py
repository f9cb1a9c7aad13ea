"""Quantiles of what a histogram observed between two scrapes (bench/server_metrics.py)."""

from __future__ import annotations

from bench.server_metrics import Samples, quantile_s


def _scrape(counts: dict[str, list[int]]) -> Samples:
    """Cumulative buckets at bounds 0.001, 0.002, 0.005 and +Inf, per container."""
    out: Samples = {}
    for container, cumulative in counts.items():
        for le, n in zip(("0.001", "0.002", "0.005", "+Inf"), cumulative, strict=True):
            out[("t_bucket", (("container", container), ("le", le)))] = float(n)
    return out


def test_the_quantile_is_the_bound_of_the_bucket_it_falls_in_over_the_growth_only() -> None:
    before = _scrape({"0": [1000, 1000, 1000, 1000], "1": [0, 0, 0, 0]})
    # Grown: container 0 by 90 at <= 1 ms and 8 in (1, 2] ms; container 1 by 2 in (2, 5].
    after = _scrape({"0": [1090, 1098, 1098, 1098], "1": [0, 0, 2, 2]})
    assert quantile_s(before, after, "t", 0.5) == 0.001
    assert quantile_s(before, after, "t", 0.95) == 0.002
    assert quantile_s(before, after, "t", 0.99) == 0.005
    assert quantile_s(before, after, "t", 0.99, {"container": "0"}) == 0.002


def test_nothing_observed_or_nothing_scraped_gives_none() -> None:
    same = _scrape({"0": [5, 5, 5, 5]})
    assert quantile_s(same, same, "t", 0.99) is None
    assert quantile_s(None, same, "t", 0.99) is None
    assert quantile_s(same, same, "other", 0.99) is None
