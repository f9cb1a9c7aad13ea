"""The replicated Tier-1 log against real failures: ZooKeeper and four plog servers as
processes on loopback (four, so a healthy group of three remains when one fails)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tidegate.core.cluster.zookeeper import ZooKeeper
from tidegate.core.segmentstore.tier1.api import (
    DataLogClosedError,
    DataLogFencedError,
    LogAddress,
)
from tidegate.core.segmentstore.tier1.replicated.cluster import ZooKeeperPlogCoordinator
from tidegate.core.segmentstore.tier1.replicated.log import ReplicatedDurableDataLog
from tidegate.core.segmentstore.tier1.replicated.replicas import Suspicions, TooFewServersError

from tests.cluster.plog import PlogCluster, PlogServerProcess, ZooKeeperServer
from tests.tier1.plog_helpers import Appender, check_read_back, payload

TIMEOUT_MS = 1000
#: A failover must let appends resume within this (the issue's "a few seconds").
RESUME_S = 5.0


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[PlogCluster]:
    c = PlogCluster(tmp_path, 4, zookeeper, f"/fail-{uuid.uuid4().hex[:8]}")
    c.start()
    yield c
    c.stop()


@pytest.fixture
async def make(cluster: PlogCluster) -> AsyncIterator[Callable[..., ReplicatedDurableDataLog]]:
    clients: list[ZooKeeper] = []

    def make(name: str = "log", **kw: Any) -> ReplicatedDurableDataLog:
        zk = ZooKeeper(cluster.zookeeper.hosts)
        clients.append(zk)
        kw.setdefault("timeout_ms", TIMEOUT_MS)
        kw.setdefault("plog_bytes_max", 1 << 20)
        return ReplicatedDurableDataLog(name, ZooKeeperPlogCoordinator(zk, cluster.root), **kw)

    yield make
    for zk in clients:
        await zk.stop()


def server(cluster: PlogCluster, sid: str) -> PlogServerProcess:
    return next(s for s in cluster.servers if s.server_id == sid)


async def read_all(log: ReplicatedDurableDataLog) -> list[tuple[LogAddress, bytes]]:
    return [(a, bytes(d)) async for a, d in log.read()]


def resumed_after(app: Appender, index: int, since: float) -> float:
    """Seconds from ``since`` to the first acknowledgement in a plog after ``index``."""
    times = [t for addr, t in app.acked.values() if addr.file_id > index]
    assert times, "no append acknowledged on a new plog"
    return min(times) - since


async def test_kill9_of_one_server_under_appends(make: Any, cluster: PlogCluster) -> None:
    log = make(plog_bytes_max=64 << 20)  # no roll: the victim stays in the active group
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(300, 20)
    index, group = log._segs[-1].index, log._segs[-1].servers
    killed_at = time.monotonic()
    server(cluster, group[0]).kill9()
    await app.wait_acked(len(app.acked) + 500, 20)
    await app.stop()
    await log.close()
    assert not app.errors
    assert log.failovers >= 1
    assert resumed_after(app, index, killed_at) < RESUME_S
    assert group[0] not in log._segs[-1].servers
    check = make()
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()


async def test_sigstop_of_one_server_seals_past_the_timeout(make: Any, cluster: PlogCluster) -> None:
    log = make(plog_bytes_max=64 << 20)  # no roll: the stopped server stays in the active group
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(300, 20)
    index, group = log._segs[-1].index, log._segs[-1].servers
    stopped = server(cluster, group[1])
    stopped_at = time.monotonic()
    stopped.pause()
    try:
        await app.wait_acked(len(app.acked) + 500, 20)
        took = resumed_after(app, index, stopped_at)
        assert TIMEOUT_MS / 1000 * 0.9 < took < RESUME_S
        failovers = log.failovers
    finally:
        stopped.resume()
    # The stopped server now answers everything it had queued: those late answers are
    # on a connection the log closed, so they change nothing.
    await app.wait_acked(len(app.acked) + 300, 20)
    await app.stop()
    assert not app.errors
    assert log.failovers == failovers >= 1
    await log.close()
    check = make()
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()


async def test_server_data_directory_deleted(make: Any, cluster: PlogCluster) -> None:
    log = make(plog_bytes_max=64 * 1024)  # many plogs, several on the wiped server
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(400, 20)
    victim = server(cluster, log._segs[-1].servers[0])
    victim.kill9()
    shutil.rmtree(victim.data_dir)
    victim.start()  # same id, nothing on disk
    await app.wait_acked(len(app.acked) + 400, 20)
    await app.stop()
    await log.close()
    assert not app.errors
    # Reads of plogs the wiped server held fall back to the other servers of its group.
    check = make()
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()


async def test_two_owners_racing_the_stale_one_is_fenced(make: Any) -> None:
    old = make()
    await old.open()
    app_old = Appender(old.append_future)
    await app_old.wait_acked(200, 20)
    new = make()
    await new.open()  # while the old owner's appends are in flight
    assert new.epoch > old.epoch
    await app_old.task
    assert app_old.errors, "the stale owner kept appending"
    assert isinstance(app_old.errors[0], DataLogFencedError | DataLogClosedError)
    with pytest.raises(DataLogClosedError):
        await old.append(b"zombie")
    await old.close()
    recovered = await read_all(new)
    check_read_back(recovered, app_old.acked)
    after = [await new.append(b"new-%d" % i) for i in range(20)]
    await new.close()
    check = make()
    await check.open()
    got = await read_all(check)
    assert got[: len(recovered)] == recovered
    assert got[len(recovered) :] == [(a, b"new-%d" % i) for i, a in enumerate(after)]
    await check.close()


async def test_client_crash_between_sealing_and_recording(make: Any, cluster: PlogCluster) -> None:
    name = "crashing"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.tier1.plog_appender_child",
         cluster.zookeeper.hosts, cluster.root, name],
        stdout=subprocess.PIPE, text=True,
    )
    acked: dict[int, tuple[LogAddress, float]] = {}
    lines: list[str] = []
    assert child.stdout is not None
    try:
        first = child.stdout.readline()
        assert first.startswith("open"), first
        while len(acked) < 500:
            line = await asyncio.to_thread(child.stdout.readline)
            assert line, "the child ended early"
            i, f, p = line.split()
            acked[int(i)] = (LogAddress(int(f), int(p)), 0.0)
        # Which group: ask the record (the child's active plog).
        zk = ZooKeeper(cluster.zookeeper.hosts)
        raw, _ = await (await _started(zk)).get(f"{cluster.root}/logs/{name}")
        victim = server(cluster, json.loads(raw)["plogs"][-1]["servers"][0])
        victim.kill9()
        rest = await asyncio.wait_for(asyncio.to_thread(child.stdout.readlines), 30)
        for line in rest:
            lines.append(line)
            if line[0].isdigit():
                i, f, p = line.split()
                acked[int(i)] = (LogAddress(int(f), int(p)), 0.0)
        assert child.wait(30) == 7, lines[-3:]
        assert any("sealed" in x for x in lines)
        await zk.stop()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    victim.start()  # back with what it had: possibly less than the seal the child made
    check = make(name)
    await check.open()
    check_read_back(await read_all(check), acked)
    after = await check.append(payload(10**6))
    await check.close()
    assert after.file_id > max(a.file_id for a, _ in acked.values())


async def _started(zk: ZooKeeper) -> ZooKeeper:
    await zk.start()
    return zk


async def test_too_few_live_servers_is_an_error_at_open(make: Any) -> None:
    log = make(replication_factor=5)
    started = time.monotonic()
    with pytest.raises(TooFewServersError, match="replication factor needs 5"):
        await log.open()
    assert time.monotonic() - started < 5


async def test_truncation_deletes_whole_plogs_on_every_server(make: Any, cluster: PlogCluster) -> None:
    log = make(plog_bytes_max=16 * 1024)
    await log.open()
    addrs = [await log.append(payload(i)) for i in range(120)]
    chain = {p.index: p for p in log._chain.meta.plogs}
    cut = addrs[100]
    dead = [p for i, p in chain.items() if i < cut.file_id]
    assert len(dead) >= 3
    await log.truncate(cut)
    files = {f.name for s in cluster.servers for f in (s.data_dir / "plogs").iterdir()}
    for p in dead:
        assert f"{p.id}.plog" not in files
    kept = [p for i, p in chain.items() if i >= cut.file_id]
    for p in kept:
        assert sum(f"{p.id}.plog" in {f.name for f in (server(cluster, s).data_dir / "plogs").iterdir()}
                   for s in p.servers) == 3
    await log.close()
    check = make()
    await check.open()
    got = await read_all(check)
    assert got == [(a, payload(i)) for i, a in enumerate(addrs) if i >= 100]
    await check.close()


async def test_kill9_while_plogs_roll_constantly(make: Any, cluster: PlogCluster) -> None:
    """Plogs of a few entries: a failure lands in the middle of switches (an old plog
    not yet recorded as sealed, a new one already written to), which a failover seals,
    records or abandons; still nothing acknowledged is lost or doubled."""
    log = make(plog_bytes_max=8 * 1024)
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(300, 20)
    victim = server(cluster, log._segs[-1].servers[0])
    victim.kill9()
    await app.wait_acked(len(app.acked) + 600, 30)
    await app.stop()
    await log.close()
    assert not app.errors
    check = make()
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()


async def test_min_replicas_keeps_writing_when_one_of_three_servers_dies(
    make: Any, cluster: PlogCluster
) -> None:
    """Three servers, replication factor 3, at least 2 (a cluster of three nodes, each
    with its plog server): a ``kill -9`` leaves no full group, so the log goes on in a
    plog on the two survivors instead of waiting for a third; nothing acknowledged is
    lost. Without ``min_replicas`` the same log cannot fail over (the test above)."""
    server(cluster, "s3").stop()
    log = make(plog_bytes_max=64 << 20, min_replicas=2, failover_timeout_ms=60_000)
    await log.open()
    assert sorted(log._segs[-1].servers) == ["s0", "s1", "s2"]
    app = Appender(log.append_future)
    await app.wait_acked(300, 20)
    index = log._segs[-1].index
    killed_at = time.monotonic()
    server(cluster, "s1").kill9()
    await app.wait_acked(len(app.acked) + 500, 20)
    assert resumed_after(app, index, killed_at) < RESUME_S
    assert sorted(log._segs[-1].servers) == ["s0", "s2"]
    await app.stop()
    await log.close()
    assert not app.errors
    check = make(min_replicas=2)
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()
    # One server left: fewer than the least group, a clear error at open.
    server(cluster, "s2").kill9()
    lonely = make(min_replicas=2)
    with pytest.raises(TooFewServersError, match="at least 2 while servers are down"):
        await lonely.open()


async def test_a_server_without_disk_room_is_left_out_of_groups(make: Any, cluster: PlogCluster) -> None:
    """A server whose disk budget cannot hold a plog refuses it (the seed's capacity
    rule); the log makes its plogs on the servers that can, through many switches."""
    small = server(cluster, "s3")
    small.stop()
    small.disk_bytes_max = 1 << 20  # below one plog's capacity
    small.start()
    log = make(plog_bytes_max=16 * 1024)
    await log.open()
    addrs = [await log.append(payload(i)) for i in range(200)]
    assert addrs[-1].file_id - addrs[0].file_id >= 5
    groups = {tuple(sorted(p.servers)) for p in log._chain.meta.plogs}
    assert groups == {("s0", "s1", "s2")}, groups
    assert not list((small.data_dir / "plogs").glob("*.plog"))
    # With one of the others gone too, no group of three has room: a clear error.
    server(cluster, "s0").kill9()
    other = make("other")
    with pytest.raises(TooFewServersError, match="1 more without disk room"):
        await other.open()
    await log.close()


async def test_plogs_truncated_while_their_server_was_down_are_swept_when_it_returns(
    make: Any, cluster: PlogCluster
) -> None:
    """Truncation deletes plogs on every server it reaches; a server that was down keeps
    them, and its orphan sweep deletes them when it starts again. The plogs the log
    still records stay."""
    log = make(plog_bytes_max=16 * 1024)
    await log.open()
    addrs = [await log.append(payload(i)) for i in range(120)]
    chain = {p.index: p for p in log._chain.meta.plogs}
    cut = addrs[100]
    dead = [p for i, p in chain.items() if i < cut.file_id]
    down = server(cluster, dead[0].servers[0])

    def plog_files() -> set[str]:
        return {f.name[: -len(".plog")] for f in (down.data_dir / "plogs").glob("*.plog")}

    down.stop()
    await log.truncate(cut)
    orphans = {p.id for p in dead if down.server_id in p.servers}
    assert orphans and orphans <= plog_files()
    kept = {p.id for i, p in chain.items() if i >= cut.file_id and down.server_id in p.servers}
    down.sweep_interval_ms = 0  # at start only
    down.start()
    deadline = time.monotonic() + 60
    # the sweep logs once it has deleted them all: wait for both
    while (orphans & plog_files() or "orphan sweep deleted" not in down.tail()) \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not orphans & plog_files(), "orphans not swept"
    assert kept <= plog_files()
    assert "orphan sweep deleted" in down.tail()
    await log.close()
    check = make()
    await check.open()
    assert await read_all(check) == [(a, payload(i)) for i, a in enumerate(addrs) if i >= 100]
    await check.close()


async def test_with_exactly_three_servers_a_restarted_one_is_used_at_once(
    make: Any, cluster: PlogCluster
) -> None:
    """Three servers, groups of three and no fewer: a ``kill -9`` leaves no group, so
    the failover waits; once the server is back it answers a probe and the failover
    goes on at once, not after the server's suspicion lapses (``suspect_ms``, 10 s)."""
    server(cluster, "s3").stop()
    log = make(plog_bytes_max=64 << 20, failover_timeout_ms=60_000)
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(300, 20)
    index = log._segs[-1].index
    victim = server(cluster, "s2")
    victim.kill9()
    await asyncio.sleep(1.0)
    assert log._failing
    victim.start()
    back_at = time.monotonic()
    await app.wait_acked(len(app.acked) + 300, 20)
    assert resumed_after(app, index, back_at) < RESUME_S
    await app.stop()
    await log.close()
    assert not app.errors
    check = make()
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()


async def test_a_failover_outlasting_the_suspicion_still_switches_plogs(
    make: Any, cluster: PlogCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exactly three servers, groups of three: a stalled server (SIGSTOP) is given up
    on, the failover seals the plog on the other two and waits for a third server; the
    server resumes but is not probed in time (here: never). Once its suspicion lapses
    (``suspect_ms``) the failover must still switch to a new plog: the sealed plog takes
    no more appends, so nothing would ever be acknowledged again."""
    server(cluster, "s3").stop()
    log = make(plog_bytes_max=64 << 20, failover_timeout_ms=60_000, suspect_ms=3000)

    async def no_probe(sids: list[str]) -> bool:
        return False

    monkeypatch.setattr(log.replicas, "_probe", no_probe)
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(300, 20)
    victim = server(cluster, log._segs[-1].servers[0])
    victim.pause()
    try:
        deadline = time.monotonic() + 60
        while not log._failing and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert log._failing, "the stalled server was not given up on"
    finally:
        victim.resume()
    back_at = time.monotonic()
    await app.wait_acked(len(app.acked) + 300, 20)
    assert max(t for _, t in app.acked.values()) - back_at < 3 + RESUME_S
    assert log.failovers >= 1
    await app.stop()
    await log.close()
    assert not app.errors
    check = make()
    await check.open()
    check_read_back(await read_all(check), app.acked)
    await check.close()


async def test_a_server_one_log_gave_up_on_is_given_up_on_by_the_others(
    make: Any, cluster: PlogCluster
) -> None:
    """Two logs of one node share their suspicions: the first waits ``timeout_ms`` for a
    stalled server and gives up on it; the second, whose own timeout is a minute, fails
    over from that server at once instead of stalling (a container recovered on a node
    after a move no longer waits again for what the node's other logs learnt)."""
    suspicions = Suspicions()
    quick = make("quick", plog_bytes_max=64 << 20, suspicions=suspicions)
    patient = make("patient", plog_bytes_max=64 << 20, timeout_ms=60_000, suspicions=suspicions)
    await quick.open()
    await patient.open()
    apps = [Appender(quick.append_future), Appender(patient.append_future)]
    for app in apps:
        await app.wait_acked(200, 20)
    # Groups of three out of four servers always share one.
    shared = sorted(set(quick._segs[-1].servers) & set(patient._segs[-1].servers))[0]
    stalled = server(cluster, shared)
    stalled.pause()
    try:
        for app in apps:  # both go on within the deadline only if both left the server
            await app.wait_acked(len(app.acked) + 300, 30)
        assert shared not in patient._segs[-1].servers
        assert patient.failovers >= 1
    finally:
        stalled.resume()
    for app in apps:
        await app.stop()
        assert not app.errors
    await quick.close()
    await patient.close()
    check = make("patient")
    await check.open()
    check_read_back(await read_all(check), apps[1].acked)
    await check.close()


async def test_a_server_whose_node_left_is_given_up_on_at_once(make: Any, cluster: PlogCluster) -> None:
    """The cluster node gives up on a plog server as soon as its node's ZooKeeper session
    ends (``SegmentStoreService.plog_server_gone``): logs with a minute's timeout leave
    the frozen server at once."""
    suspicions = Suspicions()
    log = make(plog_bytes_max=64 << 20, timeout_ms=60_000, suspicions=suspicions)
    await log.open()
    app = Appender(log.append_future)
    await app.wait_acked(200, 20)
    frozen = log._segs[-1].servers[0]
    server(cluster, frozen).pause()
    try:
        suspicions.suspect(frozen, "its node's ZooKeeper session ended", until_back=True)
        await app.wait_acked(len(app.acked) + 300, 30)
        assert frozen not in log._segs[-1].servers
    finally:
        server(cluster, frozen).resume()
    await app.stop()
    assert not app.errors
    await log.close()


async def test_a_zookeeper_outage_during_a_truncation_is_ridden_out(tmp_path: Path) -> None:
    """The log's record cannot be written while ZooKeeper is away: the truncation waits
    for it (its outcome read back) instead of stopping the log, and appends to the
    current plog go on meanwhile (the truncation failed the log at once, and with it its
    container, which could not start again until ZooKeeper was back)."""
    zookeeper = ZooKeeperServer(tmp_path / "zk")
    zookeeper.start()
    cluster = PlogCluster(tmp_path, 3, zookeeper, "/outage")
    cluster.start()
    zk = ZooKeeper(zookeeper.hosts)
    try:
        log = ReplicatedDurableDataLog("log", ZooKeeperPlogCoordinator(zk, cluster.root),
                                       timeout_ms=TIMEOUT_MS, plog_bytes_max=1 << 20)
        await log.open()
        addrs = [await log.append(payload(i)) for i in range(60)]
        cut = addrs[50]  # a cut inside the current plog is recorded too (the log's start)
        await asyncio.to_thread(zookeeper.close)
        truncating = asyncio.ensure_future(log.truncate(cut))
        during = [await asyncio.wait_for(log.append(payload(i)), 10) for i in range(60, 63)]
        await asyncio.sleep(12)  # longer than a call waits for ZooKeeper to come back
        assert not truncating.done()
        await asyncio.to_thread(zookeeper.start)
        await asyncio.wait_for(truncating, 60)
        after = await asyncio.wait_for(log.append(payload(63)), 30)
        await log.close()
        check = ReplicatedDurableDataLog("log", ZooKeeperPlogCoordinator(zk, cluster.root),
                                         timeout_ms=TIMEOUT_MS)
        await check.open()
        got = await read_all(check)
        kept = [(a, payload(i)) for i, a in enumerate(addrs) if i >= 50]
        assert got == kept + [(a, payload(60 + i)) for i, a in enumerate(during)] + [(after, payload(63))]
        await check.close()
    finally:
        await zk.stop()
        cluster.stop()
        zookeeper.close()
