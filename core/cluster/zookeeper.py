"""ZooKeeper through ``kazoo``: the only module that imports it.

``ClusterSession`` is cluster mode's one ZooKeeper session. kazoo is synchronous and
threaded: every blocking call runs in a worker thread of the session's own pool and every
watch is handed to the event loop (``call_soon_threadsafe``), so the loop never waits on
ZooKeeper and callbacks never run on kazoo's threads. Errors reach callers as
``CoordinationError``, never as kazoo's.

Layout under the chroot of ``--zookeeper``::

    /nodes/<id>          ephemeral, JSON: the node's Kafka, segment-store, REST, gRPC addresses
    /controller/leader   ephemeral, JSON {"node": id}: the controller leader
    /containers/map      JSON {"version": n, "owners": {"<cid>": node}}: container owners

An expired session loses its ephemeral nodes: ``register`` makes the node again once a
new session is connected, and leadership is given up (``on_leadership(False)``).

``ZooKeeper`` is a plain session for the replicated Tier-1 (plog servers register under
it, log chains are conditional writes of one node each): the same thread discipline.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as _BadVersion
from kazoo.exceptions import KazooException
from kazoo.exceptions import NodeExistsError as _NodeExists
from kazoo.exceptions import NoNodeError as _NoNode
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)

NODES_PATH = "/nodes"
LEADER_PATH = "/controller/leader"
MAP_PATH = "/containers/map"

Members = dict[int, dict[str, Any]]
#: A members entry with this key set belongs to a node still starting, or just back from
#: a lost session: the leader moves no running container to it (``ClusterNode``).
STARTING = "starting"

#: The longest pause between reconnection attempts: kazoo's own doubles up to an hour, so
#: a node cut off for minutes would stay away long after ZooKeeper is back.
RECONNECT_MAX_DELAY_S = 2.0
#: Threads per session for kazoo's blocking calls. Their own: a call made while ZooKeeper
#: is away waits until it is back, and in the event loop's shared pool such waits would
#: hold up the storage's file I/O (Tier-2 reads and writes, plog files) for the outage.
CALL_THREADS = 4


def _call_pool(name: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=CALL_THREADS, thread_name_prefix=name)


async def _in_pool(pool: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kw))


def _kazoo(hosts: str, session_timeout_s: float = 10.0) -> KazooClient:
    return KazooClient(
        hosts=hosts, timeout=session_timeout_s,
        connection_retry=KazooRetry(max_tries=-1, max_delay=RECONNECT_MAX_DELAY_S),
    )


class CoordinationError(Exception):
    """ZooKeeper could not be reached or refused a call."""


class MapVersionError(CoordinationError):
    """The container map changed since it was read (another leader wrote it)."""


class ClusterSession:
    """Membership, leader election and the container map over one kazoo session."""

    def __init__(self, hosts: str, node_id: int, *, session_timeout_s: float = 6.0) -> None:
        self.hosts = hosts
        self.node_id = node_id
        self.session_timeout_s = session_timeout_s
        self._client = _kazoo(hosts, session_timeout_s)
        self._pool = _call_pool(f"zookeeper-{node_id}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._registration: bytes | None = None
        self._lock = threading.Lock()
        self._on_leadership: Callable[[bool], None] | None = None
        self._leader = False
        #: The controller leader's node id as last seen (None: none elected).
        self.leader_id: int | None = None
        self._closed = False
        #: Called on the event loop when the session expired (``ClusterNode``).
        self.on_session_lost: Callable[[], None] | None = None
        self._client.add_listener(self._on_state)

    # -- session ---------------------------------------------------------------------

    async def start(self, timeout_s: float = 10.0) -> None:
        self._loop = asyncio.get_running_loop()
        base, _, chroot = self.hosts.partition("/")
        if chroot.strip("/"):
            await self._call(_ensure_chroot, base, "/" + chroot.strip("/"), timeout_s)
        await self._call(self._client.start, timeout=timeout_s)
        await self._call(self._client.ensure_path, NODES_PATH)
        await self._call(self._client.ensure_path, "/controller")
        await self._call(self._client.ensure_path, "/containers")

    async def close(self) -> None:
        self._closed = True

        def stop() -> None:
            self._client.stop()
            self._client.close()

        await asyncio.to_thread(stop)  # not behind calls waiting in the pool: it ends them
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return await _in_pool(self._pool, fn, *args, **kw)
        except _BadVersion as exc:
            raise MapVersionError(str(exc)) from exc
        except (KazooException, KazooTimeoutError, TimeoutError) as exc:
            raise CoordinationError(f"{type(exc).__name__}: {exc}") from exc

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed() and not self._closed:
            loop.call_soon_threadsafe(fn, *args)

    def _on_state(self, state: str) -> None:
        """kazoo's thread: a LOST session dropped our ephemerals, leadership included."""
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost")
            with self._lock:  # registered again as starting, until the node has settled
                if self._registration is not None:
                    info = json.loads(self._registration)
                    info[STARTING] = True
                    self._registration = json.dumps(info, sort_keys=True).encode()
            if self._leader and self._on_leadership is not None:
                self._leader = False
                self._to_loop(self._on_leadership, False)
            if self.on_session_lost is not None:
                self._to_loop(self.on_session_lost)
        elif state == KazooState.CONNECTED and not self._closed:
            # A new session after LOST: make our ephemeral nodes again (not on this thread).
            threading.Thread(target=self._reassert, daemon=True).start()

    def _reassert(self) -> None:
        try:
            with self._lock:
                data = self._registration
            if data is not None:
                self._ensure_ephemeral(f"{NODES_PATH}/{self.node_id}", data)
            if self._on_leadership is not None and not self._leader:
                self._try_lead()
        except KazooException as exc:
            log.warning("re-registration after a new ZooKeeper session failed: %r", exc)

    # -- membership ------------------------------------------------------------------

    def _ensure_ephemeral(self, path: str, data: bytes) -> None:
        try:
            self._client.create(path, data, ephemeral=True, makepath=True)
        except _NodeExists:
            _, stat = self._client.get(path)
            if stat.ephemeralOwner == self._client.client_id[0]:
                self._client.set(path, data)
                return
            # Left by an earlier session of this node id until its timeout: replace it.
            self._client.delete(path)
            self._client.create(path, data, ephemeral=True, makepath=True)

    async def register(self, info: dict[str, Any]) -> None:
        """Announce this node (ephemeral ``/nodes/<id>``), again after a session loss."""
        data = json.dumps(info, sort_keys=True).encode()
        with self._lock:
            self._registration = data
        await self._call(self._ensure_ephemeral, f"{NODES_PATH}/{self.node_id}", data)

    async def members(self) -> Members:
        return await self._call(self._read_members)  # type: ignore[no-any-return]

    def _read_members(self) -> Members:
        out: Members = {}
        for child in self._client.get_children(NODES_PATH):
            try:
                data, _ = self._client.get(f"{NODES_PATH}/{child}")
            except _NoNode:
                continue
            if child.isdigit():
                out[int(child)] = json.loads(data)
        return out

    async def read_under(self, parent: str, paths: Sequence[str]) -> tuple[list[str], dict[str, bytes]]:
        """The children of ``parent`` and the data of ``paths`` (those that exist), read
        in one thread hop (``core/cluster/replicas.py``: plog servers and logs)."""
        return await self._call(self._read_under, parent, list(paths))  # type: ignore[no-any-return]

    def _read_under(self, parent: str, paths: list[str]) -> tuple[list[str], dict[str, bytes]]:
        try:
            children = list(self._client.get_children(parent))
        except _NoNode:
            children = []
        data: dict[str, bytes] = {}
        for path in paths:
            try:
                data[path] = self._client.get(path)[0]
            except _NoNode:
                continue
        return children, data

    def watch_members(self, callback: Callable[[Members], None]) -> None:
        """``callback(members)`` on the event loop now and whenever a node joins or leaves."""

        def changed(children: list[str]) -> None:
            try:
                members = self._read_members()
            except KazooException as exc:
                log.warning("reading members failed: %r", exc)
                return
            self._to_loop(callback, members)

        self._client.ChildrenWatch(NODES_PATH, changed)

    # -- controller leader -----------------------------------------------------------

    async def campaign(self, on_leadership: Callable[[bool], None]) -> None:
        """Stand for controller leader: whoever creates the ephemeral ``/controller/leader``
        leads until its session ends; the others watch it and try again when it goes.
        ``on_leadership(True/False)`` runs on the event loop as this node wins or loses."""
        self._on_leadership = on_leadership

        def watch(data: bytes | None, stat: Any) -> None:
            self.leader_id = int(json.loads(data)["node"]) if data else None
            if data is None and not self._closed:
                self._try_lead()

        await self._call(self._try_lead)
        self._client.DataWatch(LEADER_PATH, watch)

    def _try_lead(self) -> None:
        with self._lock:
            if self._leader:
                return
            try:
                self._client.create(
                    LEADER_PATH, json.dumps({"node": self.node_id}).encode(), ephemeral=True
                )
            except _NodeExists:
                return
            self._leader = True
        log.info("node %d is the controller leader", self.node_id)
        if self._on_leadership is not None:
            self._to_loop(self._on_leadership, True)

    async def leader(self) -> int | None:
        try:
            data, _ = await self._call(self._client.get, LEADER_PATH)
        except CoordinationError as exc:
            if isinstance(exc.__cause__, _NoNode):
                return None
            raise
        return int(json.loads(data)["node"])

    @property
    def is_leader(self) -> bool:
        return self._leader

    # -- container map ---------------------------------------------------------------

    async def read_map(self) -> tuple[dict[int, int], int]:
        """The container owners and the znode's version (-1: no map yet)."""
        return await self._call(self._read_map)  # type: ignore[no-any-return]

    def _read_map(self) -> tuple[dict[int, int], int]:
        try:
            data, stat = self._client.get(MAP_PATH)
        except _NoNode:
            return {}, -1
        return _decode_map(data), int(stat.version)

    async def write_map(self, owners: dict[int, int], version: int) -> int:
        """Write the map if it is still at ``version`` (-1: create it); its new version.
        ``MapVersionError`` if another writer came first."""
        data = json.dumps({"owners": {str(c): n for c, n in sorted(owners.items())}}).encode()

        def write() -> int:
            if version < 0:
                try:
                    self._client.create(MAP_PATH, data, makepath=True)
                except _NodeExists as exc:
                    raise _BadVersion() from exc
                return 0
            return int(self._client.set(MAP_PATH, data, version=version).version)

        return await self._call(write)  # type: ignore[no-any-return]

    def watch_map(self, callback: Callable[[dict[int, int], int], None]) -> None:
        """``callback(owners, version)`` on the event loop now and after every change."""

        def changed(data: bytes | None, stat: Any) -> None:
            if data is None:
                self._to_loop(callback, {}, -1)
            else:
                self._to_loop(callback, _decode_map(data), int(stat.version))

        self._client.DataWatch(MAP_PATH, changed)


def _ensure_chroot(hosts: str, chroot: str, timeout_s: float) -> None:
    """Create the chroot of ``--zookeeper`` before the session that lives in it starts."""
    client = _kazoo(hosts)
    client.start(timeout=timeout_s)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()


def _decode_map(data: bytes) -> dict[int, int]:
    obj = json.loads(data) if data else {}
    return {int(c): int(n) for c, n in obj.get("owners", {}).items()}


# -- a plain session (replicated Tier-1) ----------------------------------------------


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
        self._client = _kazoo(hosts, session_timeout_s)
        self._pool = _call_pool("zookeeper-tier1")
        self._ephemerals: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        #: kazoo's connection routine runs (started, not stopped): it reconnects by itself.
        self._started = False
        self._client.add_listener(self._on_state)

    async def start(self) -> None:
        """Connect once; later calls wait (at most ``timeout_s``) while kazoo reconnects.

        kazoo's ``start`` on a client that is reconnecting (a lost connection or session,
        after a freeze) joins the running connection routine, which never ends: the calling
        thread, and every call after it, would hang for good (issue 26)."""
        if self._client.connected:
            return
        if self._started:
            await self._connected_within(self._timeout_s)
            return
        try:
            await self._call(self._start)
        except ZooKeeperError as exc:
            raise ZooKeeperError(f"cannot connect to ZooKeeper at {self.hosts}: {exc}") from exc

    @property
    def connected(self) -> bool:
        return bool(self._client.connected)

    async def _connected_within(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._client.connected:
            if time.monotonic() > deadline:
                log.warning("ZooKeeper at %s: still reconnecting after %.0f s", self.hosts, timeout_s)
                raise ZooKeeperError(
                    f"not connected to ZooKeeper at {self.hosts}: reconnecting for {timeout_s:.0f} s"
                )
            await asyncio.sleep(0.05)

    def _start(self) -> None:
        with self._start_lock:  # concurrent first calls share one connect
            if self._started:
                return  # started meanwhile; the caller's next call waits for the connection
            base, _, chroot = self.hosts.partition("/")
            if chroot.strip("/"):
                _ensure_chroot(base, "/" + chroot.strip("/"), self._timeout_s)
            self._client.start(timeout=self._timeout_s)  # timed out: kazoo stopped it again
            self._started = True

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_blocking)  # not behind calls waiting in the pool

    def stop_blocking(self) -> None:
        """``stop`` for callers without an event loop (test teardown)."""
        with self._start_lock:
            self._started = False
            self._client.stop()
            self._client.close()
            pool, self._pool = self._pool, _call_pool("zookeeper-tier1")
            pool.shutdown(wait=False, cancel_futures=True)

    async def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return await _in_pool(self._pool, fn, *args, **kw)
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

    async def sync(self, path: str) -> None:
        """Reads after this see every write made before it (a follower's may lag)."""
        await self._call(self._client.sync, path)

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
