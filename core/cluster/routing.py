"""``RoutingSegmentStore``: the ``SegmentStore`` Protocol over the whole cluster.

Each call goes to the owner of its segment's container (``container_of``): this node's
own store, or a ``RemoteSegmentStore`` to the owner's segment-store server. While a
container moves (no owner yet, the old owner stopped it, the new one is still recovering
it) calls get ``ContainerNotOwnedError`` or ``StoreShutdownError``; they are sent again
as the map changes, for up to ``retry_ms`` (less within ``patience``: a caller that
retries on its own), then the error reaches the caller.

Appends go only to this node's own containers and are never sent again (see
``_append_target``; only the gateway's producer state can tell a re-send from a
duplicate).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from tidegate.core.segmentstore.api import (
    AttributeUpdate,
    ContainerNotOwnedError,
    ReadResult,
    SegmentProperties,
    SegmentStore,
    SegmentStoreError,
    SegmentTraffic,
    StoreShutdownError,
    TableEntry,
    TableRemoval,
    TableUpdate,
)
from tidegate.core.segmentstore.callbacks import DoneCallback, when_done
from tidegate.core.segmentstore.remote.client import RemoteSegmentStore
from tidegate.core.segmentstore.service import container_of

log = logging.getLogger(__name__)

_patience_ms: ContextVar[int | None] = ContextVar("routing_patience_ms", default=None)


@contextmanager
def patience(ms: int) -> Iterator[None]:
    """Calls routed within wait at most ``ms`` for a moving container (this task and
    what it awaits): for callers with a retry of their own, such as a client's."""
    token = _patience_ms.set(ms)
    try:
        yield
    finally:
        _patience_ms.reset(token)

T = TypeVar("T")
_ZERO = SegmentTraffic(0.0, 0.0)


class ContainerMap:
    """This node's copy of the container map, with a wake-up for waiters on change."""

    def __init__(self) -> None:
        self.owners: dict[int, int] = {}
        self.version = -1
        self._changed = asyncio.Event()

    def update(self, owners: Mapping[int, int], version: int) -> None:
        self.owners = dict(owners)
        self.version = version
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, timeout_s: float) -> None:
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass


class PeerStores:
    """One ``RemoteSegmentStore`` per other live node, made as its address becomes known."""

    def __init__(self, traffic_refresh_ms: int = 1000) -> None:
        self.traffic_refresh_ms = traffic_refresh_ms
        self.addresses: dict[int, tuple[str, int]] = {}
        self._stores: dict[int, tuple[tuple[str, int], RemoteSegmentStore]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def update(self, addresses: Mapping[int, tuple[str, int]]) -> None:
        self.addresses = dict(addresses)
        for node, (address, store) in list(self._stores.items()):
            if self.addresses.get(node) != address:
                del self._stores[node]  # the node left or moved: close its link
                task = asyncio.ensure_future(store.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    def store(self, node: int) -> RemoteSegmentStore:
        address = self.addresses.get(node)
        if address is None:
            raise StoreShutdownError("", f"node {node} is not live")
        known = self._stores.get(node)
        if known is not None and known[0] == address:
            return known[1]
        remote = RemoteSegmentStore(*address, traffic_refresh_ms=self.traffic_refresh_ms)
        remote.start_traffic_refresh()  # the leader's auto-scaler reads remote segments' rates
        self._stores[node] = (address, remote)
        return remote

    async def close(self) -> None:
        stores = [s for _, s in self._stores.values()]
        self._stores.clear()
        await asyncio.gather(*(s.close() for s in stores), *self._closing, return_exceptions=True)


class RoutingSegmentStore:
    def __init__(
        self,
        local: SegmentStore,
        node_id: int,
        container_count: int,
        containers: ContainerMap,
        peers: PeerStores,
        *,
        retry_ms: int = 20_000,
    ) -> None:
        self.local = local
        self.node_id = node_id
        self.container_count = container_count
        self.containers = containers
        self.peers = peers
        self.retry_ms = retry_ms

    def owner(self, name: str) -> int | None:
        return self.containers.owners.get(container_of(name, self.container_count))

    def nodes(self) -> set[int]:
        """The nodes owning containers in the map (the controller's ``SegmentPlacement``)."""
        return set(self.containers.owners.values())

    def _append_target(self, name: str) -> SegmentStore:
        """Appends go to this node's own containers only: the gateway appends to the
        partitions it leads, whose segments live here; an append from a node that lost
        the lead (a re-send after a scale sealed its segment) must not land behind the
        new leader's back."""
        cid = container_of(name, self.container_count)
        if self.containers.owners.get(cid) != self.node_id:
            raise ContainerNotOwnedError(name, f"container {cid} is not owned here")
        return self.local

    def _target(self, name: str) -> SegmentStore:
        cid = container_of(name, self.container_count)
        node = self.containers.owners.get(cid)
        if node is None:
            raise ContainerNotOwnedError(name, f"container {cid} has no owner yet")
        if node == self.node_id:
            return self.local
        store: SegmentStore = self.peers.store(node)
        return store

    async def _routed(self, name: str, call: Callable[[SegmentStore], Awaitable[T]]) -> T:
        patient_ms = _patience_ms.get()
        retry_ms = self.retry_ms if patient_ms is None else min(patient_ms, self.retry_ms)
        deadline = time.monotonic() + retry_ms / 1000
        delay_s = 0.02
        while True:
            try:
                return await call(self._target(name))
            except (ContainerNotOwnedError, StoreShutdownError) as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                log.debug("%s: %r; routing again", name, exc)
                await self.containers.wait_change(min(left, delay_s))
                delay_s = min(delay_s * 2, 0.5)

    # -- lifecycle (the parts are started and closed by their owner) -------------------

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self.peers.close()

    # -- segments ------------------------------------------------------------------------

    async def create_segment(self, name: str, attributes: Mapping[str, int] | None = None) -> None:
        await self._routed(name, lambda s: s.create_segment(name, attributes))

    async def append(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
    ) -> int:
        return await self._append_target(name).append(
            name, data, expected_offset=expected_offset,
            attribute_updates=attribute_updates, event_count=event_count,
        )

    async def append_at_owner(self, name: str, data: bytes | memoryview, *, event_count: int = 1) -> int:
        """An append sent to the segment's owner wherever it is, for writers that lead
        nothing (``SegmentService.AppendEvents``: at-least-once, a retry is theirs)."""
        return await self._routed(name, lambda s: s.append(name, data, event_count=event_count))

    def append_future(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
        on_done: DoneCallback | None = None,
    ) -> asyncio.Future[int]:
        try:
            target = self._append_target(name)
        except SegmentStoreError as exc:
            failed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            when_done(failed, on_done)
            return failed
        return target.append_future(
            name, data, expected_offset=expected_offset,
            attribute_updates=attribute_updates, event_count=event_count, on_done=on_done,
        )

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        await self._routed(name, lambda s: s.update_attributes(name, updates))

    async def read(self, name: str, offset: int, max_length: int, timeout_ms: int = 0) -> ReadResult:
        return await self._routed(name, lambda s: s.read(name, offset, max_length, timeout_ms))

    async def get_info(self, name: str) -> SegmentProperties:
        return await self._routed(name, lambda s: s.get_info(name))

    async def seal(self, name: str) -> int:
        return await self._routed(name, lambda s: s.seal(name))

    async def truncate(self, name: str, offset: int) -> None:
        await self._routed(name, lambda s: s.truncate(name, offset))

    async def merge(self, target: str, source: str) -> int:
        return await self._routed(target, lambda s: s.merge(target, source))

    async def delete_segment(self, name: str) -> None:
        await self._routed(name, lambda s: s.delete_segment(name))

    def traffic(self, name: str) -> SegmentTraffic:
        try:
            return self._target(name).traffic(name)
        except SegmentStoreError:
            return _ZERO

    # -- tables --------------------------------------------------------------------------

    async def create_table(self, name: str) -> None:
        await self._routed(name, lambda s: s.create_table(name))

    async def delete_table(self, name: str, must_be_empty: bool = False) -> None:
        await self._routed(name, lambda s: s.delete_table(name, must_be_empty))

    async def table_put(self, name: str, updates: Sequence[TableUpdate]) -> list[int]:
        return await self._routed(name, lambda s: s.table_put(name, updates))

    async def table_remove(self, name: str, removals: Sequence[TableRemoval]) -> None:
        await self._routed(name, lambda s: s.table_remove(name, removals))

    async def table_get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        return await self._routed(name, lambda s: s.table_get(name, keys))

    async def table_entries(self, name: str, prefix: bytes = b"") -> list[TableEntry]:
        return await self._routed(name, lambda s: s.table_entries(name, prefix))


def _conforms(store: RoutingSegmentStore) -> SegmentStore:
    """Never called: makes mypy check that the class implements the protocol."""
    return store

