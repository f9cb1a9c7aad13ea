"""Cluster mode: a partition leader's share-partitions, persisted in the share
coordinator's table wherever its container runs (through the routing store), as Kafka's
share-partition leader persists through Read/WriteShareGroupState.

A leader claims a share-partition when it loads it (or when its leader epoch changes): a
conditional put of the state stamped with its leader epoch; every later write is
conditional on the key version its last one made. So once another leader has claimed it,
a stale leader's write fails (``BadKeyVersionError``): the stale leader drops the
share-partition and its member is told NOT_LEADER_OR_FOLLOWER, and a leader whose epoch
is below the stored one never claims it back. Writes of one share-partition run one at a
time, each with the state as it is when it runs.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    SegmentExistsError,
    SegmentStore,
    TableUpdate,
)
from tidegate.gateway.share import store as share_store

log = logging.getLogger(__name__)

Key = tuple[str, str, int]


class Fenced(Exception):
    """Another leader holds the share-partition (or a newer epoch stored it)."""


@dataclass(slots=True)
class Loaded:
    #: None: never stored.
    state: tuple[int, share_store.Runs] | None
    #: The group's configs as stored by the share coordinator.
    configs: dict[str, str]


class ShareStateClaims:
    def __init__(self, store: SegmentStore, table: str) -> None:
        self._store = store
        self.table = table
        #: Key version of each share-partition this leader last claimed or wrote.
        self.versions: dict[Key, int] = {}
        #: The leader epoch each share-partition was claimed with.
        self.epochs: dict[Key, int] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        self._table_made = False

    def lock(self, key: Key) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def forget(self, key: Key) -> None:
        """Not claimed any more (its lock stays: a waiter may hold it)."""
        self.versions.pop(key, None)
        self.epochs.pop(key, None)

    async def _make_table(self) -> None:
        if not self._table_made:  # a leader may fetch before any coordinator ran
            try:
                await self._store.create_table(self.table)
            except SegmentExistsError:
                pass
            self._table_made = True

    async def group_configs(self, group_id: str) -> dict[str, str]:
        """A share group's configs as stored (any node answers configs in cluster mode)."""
        await self._make_table()
        (entry,) = await self._store.table_get(self.table, [share_store.configs_key(group_id)])
        return share_store.decode([entry] if entry is not None else [])[1].get(group_id, {})

    async def put_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        await self._make_table()
        await self._store.table_put(self.table, [TableUpdate(
            share_store.configs_key(group_id), share_store.encode_configs(configs))])

    async def changed(self, key: Key) -> tuple[bool, dict[str, str]]:
        """Whether the stored share-partition is no longer the one this leader last
        wrote (the coordinator altered or deleted it), and the group's configs."""
        entry, configs = await self._store.table_get(
            self.table, [share_store.partition_key(*key), share_store.configs_key(key[0])])
        version = NOT_EXISTS if entry is None else entry.version
        loaded = share_store.decode([configs] if configs is not None else [])[1]
        return version != self.versions.get(key), loaded.get(key[0], {})

    async def read(self, key: Key, epoch: int) -> Loaded:
        """The stored state (its version remembered for the claim) and group configs;
        ``Fenced`` when a newer leader epoch stored it."""
        await self._make_table()
        entry, configs = await self._store.table_get(
            self.table, [share_store.partition_key(*key), share_store.configs_key(key[0])])
        state = None
        if entry is None:
            self.versions[key] = NOT_EXISTS
        else:
            start, runs, stored_epoch = share_store.decode_partition(bytes(entry.value))
            if stored_epoch > epoch:
                raise Fenced(f"{key} stored by leader epoch {stored_epoch}, this one is {epoch}")
            self.versions[key] = entry.version
            state = (start, runs)
        loaded = share_store.decode([configs] if configs is not None else [])[1]
        return Loaded(state, loaded.get(key[0], {}))

    async def write(self, key: Key, epoch: int, start_offset: int,
                    runs: share_store.Runs) -> None:
        """Put the state, conditional on the version this leader last saw; ``Fenced`` if
        another writer came between (the caller holds ``lock(key)``)."""
        version = self.versions.get(key)
        if version is None:
            raise Fenced(f"{key} is not claimed here")
        update = TableUpdate(share_store.partition_key(*key),
                             share_store.encode_partition(start_offset, runs, epoch), version)
        try:
            (new,) = await self._store.table_put(self.table, [update])
        except Exception:
            self.forget(key)  # whatever happened, the next use reads the state again
            raise
        self.versions[key] = new
        self.epochs[key] = epoch
