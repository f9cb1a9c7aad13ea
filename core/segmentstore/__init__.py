"""The segment store (Pravega's segment store design, in asyncio).

Map of the package:

- ``api.py``: the ``SegmentStore`` protocol, errors and values callers see;
  ``inmemory.py``: its reference model.
- ``service.py``: ``StreamSegmentStore``, every container of a node behind that API;
  ``config.py``: ``SegmentStoreConfig``, every bound.
- ``container.py``: one segment container; calls are validated and queued there.
- ``operations.py``: log operations and their wire format.
- ``durablelog/``: operation queue → data frames (``frames.py``) → Tier-1 → in-order
  commit (``log.py``). ``logs/``: the Tier-1 durable data logs themselves.
- ``apply.py``: applying durable operations (metadata, read index, tables, writer).
- ``metadata.py``: container and segment metadata (pending and committed views) and
  the checkpoint format.
- ``reading/``: the read index (``index.py``) and the cache (``cache.py``).
- ``writer/``: the storage writer (Tier-2 flushes, reconciliation, Tier-1 truncation).
- ``tables.py``: table segments (entries kept in a segment, indexed in memory).
- ``recovery.py``: container startup from Tier-1 and Tier-2.
- ``traffic.py``: smoothed per-segment traffic for the auto-scaler.

State that must survive a crash lives only in Tier-1 (the log, with metadata
checkpoints) and Tier-2 (segment data, table segments included); everything in memory
(metadata, read index, table indexes, the Tier-1 location of data not yet in Tier-2) is
rebuilt by recovery. RocksDB is not used by the segment store.
"""
