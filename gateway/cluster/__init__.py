"""The gateway in cluster mode: the node's assembly (``wiring``) and which node leads
each Kafka partition (``leadership``). See ``docs/cluster.md``."""
