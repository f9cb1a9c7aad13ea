"""The tidegate image, built once per session from this checkout (compose/build-image.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

# testcontainers' reaper is an image from a registry, which this machine cannot reach; the
# tests remove their containers and volumes themselves.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import docker  # noqa: E402 - after the setting above, which testcontainers reads on import

ROOT = Path(__file__).resolve().parents[2]
#: The first build makes the base image with debootstrap and builds every wheel.
BUILD_TIMEOUT_S = 900
TAG = "tidegate:test"


@pytest.fixture(scope="session")
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
