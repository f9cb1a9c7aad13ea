"""Shared test helpers: free loopback ports and temporary data directories."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bench.ports import free_port

__all__ = ["free_port"]

# The servers tests start (and ``python -m tests.cluster.chaos``) run from compiled bytecode,
# as an installed tidegate does: without it every start compiled each module again, seconds
# of a node's restart on a loaded machine.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

if TYPE_CHECKING:
    from tests.clients.server import Tidegate


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def tidegate(tmp_path: Path) -> Iterator[Tidegate]:
    """A started ``tidegate serve`` with its defaults, closed after the test (directories
    of tests that need other settings define their own)."""
    from tests.clients.server import Tidegate

    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log")
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One standalone ZooKeeper for the session; tests use distinct paths in it."""
    from tests.cluster.zk import ZooKeeperServer

    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    yield zk
    zk.close()


@pytest.fixture(scope="session")
def plog_cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Three plog servers for the session (ZooKeeper root ``/plog-shared``)."""
    from tests.cluster.plog import PlogCluster

    cluster = PlogCluster(tmp_path_factory.mktemp("plog"), 3, zookeeper, "/plog-shared")
    cluster.start()
    yield cluster
    cluster.stop()
