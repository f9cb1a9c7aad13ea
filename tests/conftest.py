"""Shared test helpers: free loopback ports and temporary data directories."""

from __future__ import annotations

import socket

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()


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
