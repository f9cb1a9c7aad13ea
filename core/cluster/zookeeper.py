"""ZooKeeper through ``kazoo``: the only module that imports it.

kazoo is synchronous and threaded: every call here runs in a worker thread
(``asyncio.to_thread``) so the event loop never waits on ZooKeeper. Errors come back
as this module's exceptions, so callers never see kazoo's.

Ephemeral registrations (``register``) are made again after a session expires: kazoo
reconnects by itself, but an expired session has lost its ephemeral nodes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as _BadVersion
from kazoo.exceptions import KazooException
from kazoo.exceptions import NodeExistsError as _NodeExists
from kazoo.exceptions import NoNodeError as _NoNode
from kazoo.handlers.threading import KazooTimeoutError

log = logging.getLogger(__name__)


class ZooKeeperError(Exception):
    """ZooKeeper could not be reached or refused a call."""


class NoNodeError(ZooKeeperError):
    pass


class NodeExistsError(ZooKeeperError):
    pass


class BadVersionError(ZooKeeperError):
    """A conditional write lost: the node changed since it was read."""


def _translate(exc: Exception) -> ZooKeeperError:
    if isinstance(exc, _NoNode):
        return NoNodeError(str(exc) or "no node")
    if isinstance(exc, _NodeExists):
        return NodeExistsError(str(exc) or "node exists")
    if isinstance(exc, _BadVersion):
        return BadVersionError(str(exc) or "bad version")
    return ZooKeeperError(f"{type(exc).__name__}: {exc}")


class ZooKeeper:
    """One ZooKeeper session. ``hosts`` is ZooKeeper's connect string (``h:p,h:p``)."""

    def __init__(self, hosts: str, *, timeout_s: float = 10.0, session_timeout_s: float = 10.0) -> None:
        self.hosts = hosts
        self._timeout_s = timeout_s
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_s)
        self._ephemerals: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._client.add_listener(self._on_state)

    async def start(self) -> None:
        """Connect (again a no-op once connected)."""
        if not self._client.connected:
            try:
                await self._call(self._start)
            except ZooKeeperError as exc:
                raise ZooKeeperError(f"cannot connect to ZooKeeper at {self.hosts}: {exc}") from exc

    def _start(self) -> None:
        with self._start_lock:  # concurrent first calls share one connect
            if not self._client.connected:
                self._client.start(timeout=self._timeout_s)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_blocking)

    def stop_blocking(self) -> None:
        """``stop`` for callers without an event loop (test teardown)."""
        self._client.stop()
        self._client.close()

    async def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kw)
        except (KazooException, KazooTimeoutError, TimeoutError) as exc:
            raise _translate(exc) from exc

    # ------------------------------------------------------------ nodes

    async def get(self, path: str) -> tuple[bytes, int]:
        """The node's data and version (``NoNodeError`` if absent)."""
        data, stat = await self._call(self._client.get, path)
        return bytes(data), int(stat.version)

    async def create(
        self, path: str, data: bytes, *, ephemeral: bool = False, makepath: bool = True
    ) -> None:
        await self._call(self._client.create, path, data, ephemeral=ephemeral, makepath=makepath)

    async def set(self, path: str, data: bytes, version: int) -> int:
        """Write ``data`` if the node is still at ``version``; its new version."""
        stat = await self._call(self._client.set, path, data, version=version)
        return int(stat.version)

    async def delete(self, path: str) -> None:
        await self._call(self._client.delete, path)

    async def children(self, path: str) -> list[str]:
        try:
            return list(await self._call(self._client.get_children, path))
        except NoNodeError:
            return []

    async def children_data(self, path: str) -> dict[str, bytes]:
        """Every child of ``path`` with its data (children gone meanwhile are left out)."""

        def read() -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            try:
                names = self._client.get_children(path)
            except _NoNode:
                return out
            for name in names:
                try:
                    data, _ = self._client.get(f"{path}/{name}")
                except _NoNode:
                    continue
                out[name] = bytes(data)
            return out

        result: dict[str, bytes] = await self._call(read)
        return result

    # ------------------------------------------------------------ ephemerals

    async def register(self, path: str, data: bytes) -> None:
        """An ephemeral node, made again whenever the session is replaced."""
        with self._lock:
            self._ephemerals[path] = data
        await self._call(self._ensure, path, data)

    def _ensure(self, path: str, data: bytes) -> None:
        try:
            self._client.create(path, data, ephemeral=True, makepath=True)
        except _NodeExists:
            # Left by our own expired session until ZooKeeper removes it: replace it.
            self._client.delete(path)
            self._client.create(path, data, ephemeral=True, makepath=True)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            # Called on kazoo's thread; kazoo forbids blocking calls here.
            self._client.handler.spawn(self._reregister)

    def _reregister(self) -> None:
        with self._lock:
            items = list(self._ephemerals.items())
        for path, data in items:
            try:
                if self._client.exists(path) is None:
                    self._ensure(path, data)
            except KazooException as exc:
                log.warning("re-registering %s failed: %r", path, exc)
