"""Compacted topics (``cleanup.policy=compact``): the key check on produce, record
decoding for those topics only, and the cleaner (``docs/compaction.md``)."""
