"""Kafka transactions (KIP-98 and successors): the coordinator (``coordinator.py``) and
its durable state (``state.py``), the markers that end a transaction in each partition
(``markers.py``), and each partition's transaction index and last stable offset
(``partition_txns.py``). See docs/transactions.md."""
