"""Benchmarks: tidegate against the peer broker Tansu and the machine's own limits.

`python -m bench.run` (what `make bench` calls) is the Kafka-level comparison;
`bench.baselines`, `bench.tier1` and `bench.segmentstore` measure the layers below it.
"""
