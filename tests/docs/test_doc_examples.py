"""Every Python block of README.md and docs/*.md that a user is told to run, run as written
against a fresh ``tidegate serve`` (only the example addresses and paths swapped), each in
a process of its own with a deadline. The Spark blocks run under PySpark with the quick
start's own settings, and without PYSPARK_PYTHON: Spark's workers start ``python3`` from
PATH, as they do for a user whose venv is not activated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.clients.server import Tidegate
from tests.docs.examples import REPO, Block, adapt, all_blocks, shell_commands

HERE = Path(__file__).resolve().parent
BLOCK_DEADLINE_S = 120.0
SPARK_DEADLINE_S = 420.0
SPARK_DOC = REPO / "docs" / "spark.md"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    s = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", grpc=True)
    s.start()
    yield s
    s.close()


def _user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return env


def _run(args: list[str], deadline_s: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=deadline_s, env=_user_env(), cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{args[-1][:200]!r} ran past {deadline_s}s:\n{exc.stdout!r}\n{exc.stderr!r}") from None


def test_the_blocks_are_found() -> None:
    names = [b.name for b in all_blocks()]
    assert "README.md:40" in names
    assert sum(b.path == SPARK_DOC for b in all_blocks()) >= 2


@pytest.mark.parametrize("block", [b for b in all_blocks() if b.path != SPARK_DOC], ids=lambda b: b.name)
def test_block_runs_as_written(block: Block, server: Tidegate, tmp_path: Path) -> None:
    code = adapt(block.code, server.bootstrap, f"127.0.0.1:{server.grpc_port}", tmp_path)
    done = _run([sys.executable, "-c", code], BLOCK_DEADLINE_S, tmp_path)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout}\n{done.stderr[-4000:]}"


def test_readme_shell_commands_run_as_written(tmp_path: Path) -> None:
    """The README's kcat and curl commands, in order against one fresh server (the scale
    example splits the topic the kcat example created), each printing what the README
    shows of its output."""
    commands = shell_commands(REPO / "README.md")
    assert [c.text.split()[0] for c in commands] == ["printf", "kcat", "kcat", "curl", "curl", "curl"]
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", rest=True)
    server.start()
    try:
        for command in commands:
            code = (command.text.replace("127.0.0.1:9092", server.bootstrap)
                    .replace("127.0.0.1:9080", f"127.0.0.1:{server.rest_port}"))
            done = _run(["bash", "-e", "-o", "pipefail", "-c", code], BLOCK_DEADLINE_S, tmp_path)
            where = f"README.md:{command.line}"
            assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr[-2000:]}"
            assert command.expected in done.stdout, f"{where} printed {done.stdout[:500]!r}"
    finally:
        server.close()


@pytest.mark.timeout(SPARK_DEADLINE_S + 60)
def test_spark_quick_start_writes_its_windows(server: Tidegate, tmp_path: Path) -> None:
    # Three users in a 10 s window a minute ago, and a later event whose watermark closes it.
    start_ms = (int(time.time() * 1000) - 60_000) // 10_000 * 10_000
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True})
    for i, user in enumerate(["u0", "u1", "u2", "u0"]):
        producer.produce("events", key=user.encode(), value=b"clicked", timestamp=start_ms + 1000 * i)
    producer.produce("events", key=b"late", value=b"clicked", timestamp=start_ms + 30_000)
    assert producer.flush(30) == 0
    done = _run([sys.executable, str(HERE / "spark_quickstart.py"), server.bootstrap,
                 f"127.0.0.1:{server.grpc_port}", str(tmp_path), "3", str(SPARK_DEADLINE_S)],
                SPARK_DEADLINE_S + 30, tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"the quick start did not finish:\n{done.stdout}\n{done.stderr[-6000:]}"
    report = json.loads(lines[-1])
    windows = sorted((r["user"], r["count"]) for r in map(json.loads, report["results"]))
    assert windows == [("u0", 2), ("u1", 1), ("u2", 1)], report
    print("micro-batches:", report["batches"])
