"""``ClusterNode``: one node's part in cluster mode.

- Membership: the node registers its addresses (ephemeral ``/nodes/<id>``) and follows
  the others'; the segment-store addresses feed ``PeerStores``.
- Controller leader: the node stands for election; the leader (and only it) keeps the
  container map balanced over the live nodes (``assignment.assign``) whenever one joins
  or leaves or it has just been elected, and ``on_leadership`` tells the caller, which
  starts or stops the controller's workflows and policies.
- Containers: every node follows the map, stopping the containers it no longer owns and
  starting (recovering) the ones it now owns; after its session expired it stops them
  all first (another node may have run them meanwhile). A container a stale owner still runs is
  fenced when the new owner opens its Tier-1 log (the epoch), so there is one writer.
  ``on_owned(gained, lost)`` runs after each change so the gateway can rebuild state.
- A container the map gives to another node while this node runs (or starts) it is
  *interrupted* at once, as the map change is seen (``on_interrupted``), not when the
  reconcile gets to it: the gateway stops serving it and its restart watcher lets it be,
  and the reconcile stops it even if the map gives it back meanwhile, so what another node
  appended is recovered and indexed before it is served again (a reconcile slowed by a long
  index catch-up once missed such a round trip and served stale producer state).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tidegate.core.cluster.assignment import assign, moves
from tidegate.core.cluster.routing import ContainerMap, PeerStores
from tidegate.core.cluster.zookeeper import (
    STARTING,
    ClusterSession,
    CoordinationError,
    MapVersionError,
    Members,
)

log = logging.getLogger(__name__)
#: First wait before taking up controller leadership again after a failure, and the most.
LEADERSHIP_RETRY_S = 0.5
LEADERSHIP_RETRY_MAX_S = 5.0
#: Longest a container's start (its recovery) may take before it is given up and retried.
START_TIMEOUT_MS = 120_000
#: A container start failing the same way again is logged once in this long.
START_FAILURE_LOG_S = 30.0
#: How often the node checks that it did not stand still (frozen, or its loop held up).
STALL_CHECK_S = 0.25
#: How often the leader looks again whether a starting node serves yet (its entry's data
#: changes, which the members watch does not report).
READY_POLL_S = 1.0
#: How long after a lost session a node stays "starting" (``_settle``).
REJOIN_DELAY_S = 10.0


class Ticker:
    """A thread that notes how long it last went without running: the whole process
    stood still (SIGSTOP) when it did too, not only the event loop."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._last = time.monotonic()
        #: When the longest recent pause ended, and how long it was.
        self._paused: tuple[float, float] = (0.0, 0.0)
        self._stopping = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="stall-ticker", daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.wait(self.period_s):
            now = time.monotonic()
            if now - self._last > self.period_s * 4:
                self._paused = (now, now - self._last)
            self._last = now

    def stood_still(self, at_least_s: float) -> bool:
        """Whether this thread, too, went ``at_least_s`` without running, up to now or in
        a pause that ended within the last few seconds (whichever of it and the loop
        woke first)."""
        now = time.monotonic()
        ended, length = self._paused
        return now - self._last >= at_least_s * 0.9 or (
            length >= at_least_s * 0.9 and now - ended < 5.0)


class ContainerCountError(CoordinationError):
    """This node was given another container count than the cluster has."""


class LocalContainers(Protocol):
    """What the node needs of its own segment store."""

    async def start_container(self, cid: int) -> None: ...

    async def stop_container(self, cid: int) -> None: ...

    def plog_server_gone(self, server_id: str, reason: str) -> None: ...

    def plog_server_back(self, server_id: str) -> None: ...

    def release(self, cid: int) -> None:
        """Stop restarting ``cid`` on failure (another node owns it now); it is stopped later."""


OwnedCallback = Callable[[set[int], set[int]], Awaitable[None]]
LeadershipCallback = Callable[[bool], Awaitable[None]]


class ClusterNode:
    def __init__(
        self,
        session: ClusterSession,
        local: LocalContainers,
        *,
        node_id: int,
        container_count: int,
        info: dict[str, Any],
        start_retry_ms: int = 500,
        start_timeout_ms: int = START_TIMEOUT_MS,
    ) -> None:
        self.session = session
        self.local = local
        self.node_id = node_id
        self.container_count = container_count
        self.info = info
        self.start_retry_ms = start_retry_ms
        self.start_timeout_ms = start_timeout_ms
        self.containers = ContainerMap()
        self.peers = PeerStores()
        self.members: Members = {}
        self.running: set[int] = set()
        #: Why each container this node owns and does not run yet did not start.
        self.start_errors: dict[int, BaseException] = {}
        self._start_logged: dict[int, tuple[str, float]] = {}
        #: Gains and losses ``on_owned`` has not taken yet (it failed): told again next time.
        self._untold_gained: set[int] = set()
        self._untold_lost: set[int] = set()
        self.leader = False
        self.on_owned: OwnedCallback | None = None
        #: Containers the map gave another node while they ran or started here: not to
        #: be served, stopped by the reconcile whatever the map says by then.
        self.interrupted: set[int] = set()
        #: Told (synchronously) of newly interrupted containers.
        self.on_interrupted: Callable[[set[int]], None] | None = None
        self._starting: set[int] = set()
        self.on_leadership: LeadershipCallback | None = None
        self._reconcile_wake = asyncio.Event()
        self._rebalance_wake = asyncio.Event()
        self._leadership_events: asyncio.Queue[bool] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._settling: asyncio.Task[None] | None = None
        self._closed = False
        self._session_lost = False
        self._stall_check: asyncio.TimerHandle | None = None
        self._ticker = Ticker(STALL_CHECK_S)

    async def start(self) -> None:
        """Join: register, follow members and the map, stand for controller leader."""
        await self.session.start()
        await self.session.register(self.info)
        self.members = await self.session.members()
        self._peers_from_members()
        owners, version = await self.session.read_map()
        if owners and sorted(owners) != list(range(self.container_count)):
            await self.session.close()
            raise ContainerCountError(
                f"the cluster has {len(owners)} segment containers, this node was given "
                f"{self.container_count} (--container-count must match on every node)"
            )
        self.containers.update(owners, version)
        loop = asyncio.get_running_loop()
        for job in (self._reconcile_loop, self._rebalance_loop, self._leadership_loop):
            self._tasks.append(loop.create_task(job()))
        self.session.on_session_lost = self._lost_session
        self._ticker.start()
        self._check_stall(loop.time())
        self.session.watch_members(self._members_changed)
        self.session.watch_map(self._map_changed)
        await self.session.campaign(self._leadership_changed)

    async def close(self) -> None:
        """Leave: stop following, close the session (its ephemerals go), close peers.
        The caller stops the local containers (the store's close)."""
        self._closed = True
        if self._stall_check is not None:
            self._stall_check.cancel()
        self._ticker.stop()
        for task in [*self._tasks, *([self._settling] if self._settling else [])]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.session.close()
        await self.peers.close()

    def owned(self) -> set[int]:
        return {c for c, n in self.containers.owners.items() if n == self.node_id}

    # -- watches (on the event loop) ---------------------------------------------------

    def _peers_from_members(self) -> None:
        addresses: dict[int, tuple[str, int]] = {}
        for node, info in self.members.items():
            host, _, port = str(info.get("store", "")).rpartition(":")
            if node != self.node_id and host and port.isdigit():
                addresses[node] = (host, int(port))
        self.peers.update(addresses)

    def _members_changed(self, members: Members) -> None:
        for node, info in self.members.items():
            if node not in members and info.get("plog"):
                self.local.plog_server_gone(
                    str(info["plog"]), f"node {node}'s ZooKeeper session ended")
        for node, info in members.items():
            if node not in self.members and info.get("plog"):
                self.local.plog_server_back(str(info["plog"]))
        self.members = members
        self._peers_from_members()
        self._rebalance_wake.set()

    def _map_changed(self, owners: dict[int, int], version: int) -> None:
        if version >= self.containers.version or version < 0:
            self._interrupt(owners, version)
            self.containers.update(owners, version)
        self._reconcile_wake.set()
        self._rebalance_wake.set()  # the leader repairs a map that lost its balance

    def _interrupt(self, owners: dict[int, int], version: int) -> None:
        """Mark the containers run or started here that the new map gives another node;
        all of them when a version was skipped (a watch reports only the latest map, and
        one in between may have given them away and back)."""
        mine = self.running | self._starting
        skipped = self.containers.version >= 0 and version > self.containers.version + 1
        gone = {c for c in mine if skipped or owners.get(c) != self.node_id} - self.interrupted
        self._give_up(gone, f"the map (version {version}) " + (
            "skipped a version" if skipped else "gives them to another node"))

    def _give_up(self, gone: set[int], why: str) -> None:
        if not gone:
            return
        log.info("containers %s interrupted: %s", sorted(gone), why)
        self.interrupted |= gone
        for cid in gone:
            self.local.release(cid)
        if self.on_interrupted is not None:
            self.on_interrupted(gone)
        self._reconcile_wake.set()

    def _lost_session(self, why: str = "the ZooKeeper session was lost") -> None:
        """The session expired (this node was frozen or cut off): others may have run
        its containers meanwhile, and the map may give them back before this node sees
        that it lost them. None is trusted: every one is stopped, and what the map says
        is this node's starts afresh (recovered; the gateway catches up)."""
        self._give_up((self.running | self._starting) - self.interrupted, why)
        self._session_lost = True
        self._reconcile_wake.set()

    def _check_stall(self, due: float) -> None:
        """A timer callback, not a task: after a freeze it runs in the loop's first round,
        before any request read meanwhile is handled. A process that stood still as long
        as its ZooKeeper session lasts has lost it, though kazoo has yet to say so: serving
        on until then would answer from state other nodes have moved past. Only the whole
        process counts (SIGSTOP): while the loop alone is held up, kazoo's thread goes on
        keeping the session, as the ticker thread shows."""
        loop = asyncio.get_running_loop()
        stood_s = loop.time() - due
        if (stood_s >= self.session.session_timeout_s and (self.running or self._starting)
                and self._ticker.stood_still(self.session.session_timeout_s)):
            self._lost_session(f"this node stood still for {stood_s:.1f} s, as long as its "
                               "ZooKeeper session lasts")
        self._stall_check = loop.call_at(loop.time() + STALL_CHECK_S, self._check_stall,
                                         loop.time() + STALL_CHECK_S)

    def _leadership_changed(self, leading: bool) -> None:
        # Followed at once: the rebalance and the forwarding of controller writes go by
        # it, whatever the controller's own start or stop (``on_leadership``) waits for.
        # Once, a stop stuck on a background job left an elected node not rebalancing
        # and forwarding writes to itself, and the cluster waited on a dead node for good.
        self.leader = leading
        if leading:
            self._rebalance_wake.set()
        self._leadership_events.put_nowait(leading)

    # -- loops -----------------------------------------------------------------------

    async def _leadership_loop(self) -> None:
        told = False
        while True:
            leading = await self._leadership_events.get()
            if leading == told or self.on_leadership is None:
                continue
            told = leading
            await self._tell_leadership(leading)

    async def _tell_leadership(self, leading: bool) -> None:
        """``on_leadership(leading)``; taking leadership is tried again until it succeeds
        or a newer change comes: elected while the containers are still being placed, the
        controller's first reads can fail, and a leader that gave up would run no workflow
        recovery, scaling, retention or transaction timeouts."""
        assert self.on_leadership is not None
        delay_s = LEADERSHIP_RETRY_S
        while True:
            try:
                await self.on_leadership(leading)
                return
            except Exception as exc:
                if not leading:
                    log.exception("controller leadership change (%s) failed", leading)
                    return
                log.warning("controller leadership not taken up (%r); retrying in %.1f s", exc, delay_s)
            await asyncio.sleep(delay_s)
            if not self._leadership_events.empty():
                return  # the next change decides
            delay_s = min(2 * delay_s, LEADERSHIP_RETRY_MAX_S)

    async def _rebalance_loop(self) -> None:
        while True:
            await self._rebalance_wake.wait()
            self._rebalance_wake.clear()
            if not self.leader:
                continue
            try:
                await self._rebalance()
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one round
                log.warning("container map not written: %r", exc)
                await asyncio.sleep(0.2)
                self._rebalance_wake.set()

    async def _rebalance(self) -> None:
        owners, version = await self.session.read_map()
        members = await self.session.members()
        live = set(members)
        # A node still starting (its members entry says so until it serves) takes no
        # container from a live owner: moved to it mid-start-up, the container's
        # partitions waited on that start-up, then stopped again when it was done.
        # Containers with no live owner go to whoever is live.
        holding = set(owners.values())
        eligible = {n for n in live if n in holding or not members[n].get(STARTING)} or live
        if eligible != live:
            asyncio.get_running_loop().call_later(READY_POLL_S, self._rebalance_wake.set)
        wanted = assign(owners, self.container_count, eligible)
        if wanted == owners or not wanted:
            return
        try:
            await self.session.write_map(wanted, version)
        except MapVersionError:
            self._rebalance_wake.set()  # written meanwhile: read it again
            return
        log.info(
            "container map: %d moved over nodes %s: %s",
            moves(owners, wanted), sorted(live), wanted,
        )

    async def _reconcile_loop(self) -> None:
        while True:
            await self._reconcile_wake.wait()
            self._reconcile_wake.clear()
            try:
                await self._reconcile()
            except Exception as exc:
                # Retried: what a change finds can be mid-change elsewhere (a topic being created).
                log.warning("following the container map failed (%r); retrying", exc)
                log.debug("following the container map failed", exc_info=True)
                await asyncio.sleep(self.start_retry_ms / 1000)
                self._reconcile_wake.set()

    def _start_failed(self, cid: int, exc: BaseException) -> bool:
        """Kept for ``waiting_for``; whether to log it (it changed, or once a while)."""
        self.start_errors[cid] = exc
        text, now = repr(exc), asyncio.get_running_loop().time()
        last = self._start_logged.get(cid)
        if last is None or last[0] != text or now - last[1] >= START_FAILURE_LOG_S:
            self._start_logged[cid] = (text, now)
            return True
        return False

    def waiting_for(self) -> str | None:
        """The containers this node owns and could not start yet, and why (None: none)."""
        waiting = sorted(c for c in self.owned() - self.running if c in self.start_errors)
        if not waiting:
            return None
        why: dict[tuple[str, str], list[int]] = {}
        for cid in waiting:
            exc = self.start_errors[cid]
            missing = getattr(exc, "missing", 0)
            what = f"{missing} more plog server{'s' if missing > 1 else ''}" if missing > 0 else ""
            why.setdefault((what, f"{type(exc).__name__}: {exc}"), []).append(cid)
        return "; ".join(
            f"{what or 'a retry'} to start container{'s' if len(cids) > 1 else ''} "
            f"{', '.join(map(str, cids))} ({reason})" for (what, reason), cids in why.items()
        )

    async def _start_one(self, cid: int, unlogged: dict[str, list[int]]) -> bool:
        """Start (recover) container ``cid``; whether it runs here now. A failure to log
        is added to ``unlogged`` by its cause."""
        bound = asyncio.timeout(self.start_timeout_ms / 1000)
        self._starting.add(cid)
        try:
            async with bound:
                await self.local.start_container(cid)
            if cid in self.interrupted:  # another node may have claimed it meanwhile
                log.info("container %d was given away while it started: stopping it", cid)
                self.interrupted.discard(cid)
                await self.local.stop_container(cid)
                return False
        except TimeoutError as exc:
            stuck = "its start is stuck" if bound.expired() else repr(exc)
            if self._start_failed(cid, exc):
                log.warning("container %d did not start within %d ms (%s); retrying",
                            cid, self.start_timeout_ms, stuck)
            return False
        except Exception as exc:  # noqa: BLE001 - retried while the map says so
            if self._start_failed(cid, exc):
                unlogged.setdefault(repr(exc), []).append(cid)
            return False
        finally:
            self._starting.discard(cid)
        self.start_errors.pop(cid, None)
        self._start_logged.pop(cid, None)
        log.info("container %d started here", cid)
        self.running.add(cid)
        return True

    async def _settle(self) -> None:
        """Back from a lost session, the node registered as starting (``ClusterSession``):
        still busy with what it gave up, a container moved back to it at once stopped twice
        in a row. It registers as it is after ``REJOIN_DELAY_S``."""
        await asyncio.sleep(REJOIN_DELAY_S)
        while not self._closed:
            try:
                await self.session.register(self.info)
                return
            except CoordinationError as exc:
                log.warning("registration after a lost session failed (%r); retrying", exc)
                await asyncio.sleep(1.0)

    async def _reconcile(self) -> None:
        dropped: set[int] = set()
        if self._session_lost:
            dropped = set(self.running)
            for cid in sorted(dropped):
                log.info("container %d stopped: the ZooKeeper session was lost", cid)
                self.running.discard(cid)
                await self.local.stop_container(cid)
            self._untold_lost |= dropped  # told to ``on_owned`` even if the read fails
            # What may start again comes from the map as ZooKeeper has it now, not from the
            # watch's copy: a frozen node has not seen it change, and starting a container
            # from a stale copy took it back from its new owner (a CI chaos run lost two
            # acknowledged records so). A failed read is retried with the flag still set.
            owners, version = await self.session.read_map()
            if version >= self.containers.version:
                self._interrupt(owners, version)
                self.containers.update(owners, version)
            self._session_lost = False
            if self._settling is not None:
                self._settling.cancel()
            self._settling = asyncio.get_running_loop().create_task(self._settle())
        want = self.owned()
        lost = (self.running - want) | (self.running & self.interrupted)
        for cid in sorted(lost):
            log.info("container %d moves away: stopping it", cid)
            self.running.discard(cid)
            await self.local.stop_container(cid)
            self.interrupted.discard(cid)
        self.interrupted &= self.running  # given away before it started: nothing to stop
        unlogged: dict[str, list[int]] = {}  # failures to log: one line for each cause
        # Started side by side: each waits mostly on its Tier-1 log's recovery.
        starts = [cid for cid in sorted(want - self.running) if cid in self.owned()]
        started = await asyncio.gather(*(self._start_one(cid, unlogged) for cid in starts))
        gained = {cid for cid, ok in zip(starts, started, strict=True) if ok}
        failed = len(gained) < len(starts)
        for text, cids in unlogged.items():
            log.warning("container%s %s did not start (%s); retrying",
                        "s" if len(cids) > 1 else "", ", ".join(map(str, cids)), text)
        # Told after the starts: ``on_owned`` reads other containers, maybe ones that
        # other nodes' own ``on_owned`` is waiting to see started here.
        lost |= dropped
        gained |= self._untold_gained & self.running
        lost |= self._untold_lost - self.running
        if (gained or lost) and self.on_owned is not None:
            self._untold_gained, self._untold_lost = gained, lost
            await self.on_owned(gained, lost)
            self._untold_gained, self._untold_lost = set(), set()
        if failed:
            await asyncio.sleep(self.start_retry_ms / 1000)
            self._reconcile_wake.set()
