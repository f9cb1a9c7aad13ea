"""The Docker image (compose/Dockerfile, built by compose/build-image.sh with no registry)
runs the embedded node: kcat round-trips records through the published port, SIGTERM
stops it cleanly, and a new container on the same volume serves what was written.

Needs a Docker engine (``make test`` installs docker.io and starts dockerd as root); the
container is driven through the Docker API with testcontainers."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from testcontainers.core.container import DockerContainer

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
KCAT = shutil.which("kcat") or "kcat"
#: The first build makes the base image with debootstrap and builds every wheel.
BUILD_TIMEOUT_S = 900
TAG = "tidegate:test"


@pytest.fixture(scope="module")
def image() -> str:
    try:
        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine to test with
        pytest.fail(f"no Docker engine reachable ({exc}); `make test` starts dockerd as root")
    build = subprocess.run(
        [str(ROOT / "compose" / "build-image.sh"), TAG],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]
    return TAG


@pytest.fixture
def volume() -> Iterator[str]:
    client = docker.from_env()
    vol = client.volumes.create()
    yield vol.name
    vol.remove(force=True)


def _node(image: str, volume: str, port: int) -> DockerContainer:
    return (
        DockerContainer(image)
        .with_bind_ports(9092, port)
        .with_volume_mapping(volume, "/data", "rw")
        .with_command(f"--advertised-listener 127.0.0.1:{port}")
    )


def _ready(container: DockerContainer, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out, err = container.get_logs()
        if b"tidegate ready" in out + err:
            return
        time.sleep(0.2)
    out, err = container.get_logs()
    raise AssertionError(f"tidegate not ready in the container:\n{(out + err).decode()[-4000:]}")


def _kcat(port: int, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        [KCAT, "-b", f"127.0.0.1:{port}", *args], input=stdin, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def test_image_round_trips_records_and_keeps_them_across_containers(image: str, volume: str) -> None:
    port = free_port()
    records = b"".join(f"k{i}:v{i}\n".encode() for i in range(100))
    with _node(image, volume, port) as node:
        _ready(node)
        _kcat(port, "-P", "-t", "orders", "-K", ":", stdin=records)
        out = _kcat(port, "-C", "-t", "orders", "-o", "beginning", "-e", "-q", "-K", ":")
        assert out.splitlines() == records.decode().splitlines()
        wrapped = node.get_wrapped_container()
        wrapped.stop(timeout=30)
        assert wrapped.wait(timeout=30)["StatusCode"] == 0  # SIGTERM: a clean stop
    port = free_port()
    with _node(image, volume, port) as node:
        _ready(node)
        out = _kcat(port, "-C", "-t", "orders", "-o", "beginning", "-e", "-q", "-K", ":")
        assert out.splitlines() == records.decode().splitlines()
