"""``ZooKeeperPlogCoordinator``: the ``PlogCoordinator`` over ZooKeeper.

Paths under ``root`` (default ``/tidegate/plog``): ``servers/<id>`` (ephemeral, made
by each plog server), ``logs/<name>`` (each log's metadata, ``meta.py``).
"""

from __future__ import annotations

import json

from tidegate.core.cluster.zookeeper import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    ZooKeeper,
)
from tidegate.core.segmentstore.tier1.replicated.meta import (
    MetadataConflictError,
    MetadataExistsError,
)


class ZooKeeperPlogCoordinator:
    def __init__(self, zk: ZooKeeper, root: str = "/tidegate/plog") -> None:
        self.zk = zk
        self.root = root.rstrip("/")

    async def _zk(self) -> ZooKeeper:
        await self.zk.start()
        return self.zk

    def _log(self, name: str) -> str:
        return f"{self.root}/logs/{name}"

    async def read_log(self, name: str) -> tuple[bytes, int] | None:
        try:
            return await (await self._zk()).get(self._log(name))
        except NoNodeError:
            return None

    async def create_log(self, name: str, data: bytes) -> int:
        try:
            await (await self._zk()).create(self._log(name), data)
        except NodeExistsError:
            raise MetadataExistsError(name) from None
        return 0

    async def write_log(self, name: str, data: bytes, version: int) -> int:
        try:
            return await (await self._zk()).set(self._log(name), data, version)
        except (BadVersionError, NoNodeError):
            raise MetadataConflictError(name) from None

    async def live_servers(self) -> dict[str, tuple[str, int]]:
        out: dict[str, tuple[str, int]] = {}
        for sid, raw in (await (await self._zk()).children_data(f"{self.root}/servers")).items():
            try:
                obj = json.loads(raw)
                out[sid] = (str(obj["host"]), int(obj["port"]))
            except (ValueError, KeyError, TypeError):
                continue
        return out
