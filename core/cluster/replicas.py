"""A container's replicas as Kafka reports a partition's in cluster mode: the nodes
whose plog servers hold the container's Tier-1 log (``docs/cluster.md``).

A partition's records are durable once its container's replicated Tier-1 log has them
on the plog servers of its active plog, so those are its replicas in Kafka's sense:
Metadata reports them (leader first) as ``replica_nodes``, and as ``isr_nodes`` those
whose plog server is registered and whose node is a live member. Each node announces
its embedded plog server's id in its member record (``plog``); a plog server that is no
node's (``tidegate plog``) has no broker id and is left out, a dead node's is named but
out of sync (and offline). The logs' metadata and the
live servers are read from ZooKeeper at most once per ``refresh_ms``; until then, or
when ZooKeeper cannot be read, a partition reports its leader alone (as on one node).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tidegate.core.segmentstore.tier1.api import DataLogCorruptError
from tidegate.core.segmentstore.tier1.replicated.meta import LogMeta

log = logging.getLogger(__name__)


class ZooKeeperReads(Protocol):
    async def read_under(self, parent: str, paths: Sequence[str]) -> tuple[list[str], dict[str, bytes]]: ...


@dataclass(frozen=True)
class ReplicaSet:
    replicas: list[int]
    isr: list[int]
    offline: list[int]

    @staticmethod
    def alone(leader: int) -> ReplicaSet:
        return ReplicaSet([leader], [leader], [])


@dataclass
class _Snapshot:
    at: float
    #: Each container's active plog's servers (ids).
    servers: dict[int, list[str]]
    live_servers: set[str]


class PlogReplicas:
    def __init__(
        self,
        zookeeper: ZooKeeperReads,
        members: Callable[[], Mapping[int, Mapping[str, Any]]],
        *,
        container_count: int,
        root: str,
        log_prefix: str,
        refresh_ms: int = 1000,
    ) -> None:
        self.zookeeper = zookeeper
        self.members = members
        self.container_count = container_count
        self.root = root.rstrip("/")
        self.log_prefix = log_prefix
        self.refresh_ms = refresh_ms
        self._snapshot: _Snapshot | None = None
        self._reading: asyncio.Task[_Snapshot] | None = None
        #: Plog server id -> node, as members announced them (kept: a dead node's
        #: server stays a replica, out of sync, while its plogs are in use).
        self._node_of: dict[str, int] = {}

    def _log_path(self, cid: int) -> str:
        return f"{self.root}/logs/{self.log_prefix}container-{cid}"

    async def _read(self) -> _Snapshot:
        paths = [self._log_path(c) for c in range(self.container_count)]
        live, data = await self.zookeeper.read_under(f"{self.root}/servers", paths)
        servers: dict[int, list[str]] = {}
        for cid, path in enumerate(paths):
            raw = data.get(path)
            if raw is None:
                continue
            try:
                meta = LogMeta.from_bytes(raw)
            except DataLogCorruptError as exc:
                log.debug("container %d: %s", cid, exc)
                continue
            if meta.plogs:  # the last plog is the one being written (or the last written)
                servers[cid] = list(meta.plogs[-1].servers)
        return _Snapshot(time.monotonic(), servers, set(live))

    async def snapshot(self) -> _Snapshot | None:
        """The latest read, read again if older than ``refresh_ms`` (one read at a time,
        shared by every caller); None while ZooKeeper cannot be read."""
        known = self._snapshot
        if known is not None and time.monotonic() - known.at < self.refresh_ms / 1000:
            return known
        if self._reading is None or self._reading.done():
            self._reading = asyncio.get_running_loop().create_task(self._read())
        try:
            self._snapshot = await asyncio.shield(self._reading)
        except Exception as exc:  # noqa: BLE001 - reported as the leader alone meanwhile
            log.debug("plog replicas not read: %r", exc)
            return None
        return self._snapshot

    def replica_set(self, snapshot: _Snapshot | None, cid: int, leader: int) -> ReplicaSet:
        """Container ``cid``'s replicas, its owner ``leader`` first."""
        if snapshot is None or cid not in snapshot.servers:
            return ReplicaSet.alone(leader)
        members = self.members()
        for node, info in members.items():
            if info.get("plog"):
                self._node_of[str(info["plog"])] = node
        node_of = self._node_of
        replicas, isr, offline = [leader], [leader], []
        for sid in snapshot.servers[cid]:
            found = node_of.get(sid)
            if found is None or found == leader:
                continue  # the leader, or a plog server that is no node's
            replicas.append(found)
            if sid in snapshot.live_servers:
                isr.append(found)
        offline = [n for n in replicas if n not in members]
        return ReplicaSet(replicas, isr, offline)

    async def close(self) -> None:
        if self._reading is not None and not self._reading.done():
            self._reading.cancel()
            await asyncio.gather(self._reading, return_exceptions=True)
