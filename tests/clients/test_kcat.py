"""Conformance: kcat (librdkafka, driven as a subprocess) against a real
``tidegate serve``. Topics are auto-created from Metadata with ``num.partitions = 3``
set in the server's TOML config, which exercises ``--config`` too."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.server import Tidegate

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
LINES = 8
BIG_BYTES = 1_000_000
KCAT = shutil.which("kcat") or "kcat"


def _kcat(bootstrap: str, *args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(
        [KCAT, "-b", bootstrap, "-m", "10", *args], input=stdin, capture_output=True,
        timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    config = tmp_path / "tidegate.toml"
    config.write_text('"num.partitions" = 3\n"auto.create.topics.enable" = true\n')
    tg = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    tg.start()
    yield tg
    tg.close()


def _lines(topic: str, p: int, round_: int) -> list[tuple[str | None, str | None]]:
    out: list[tuple[str | None, str | None]] = []
    for i in range(LINES):
        key = None if i % 3 == 0 and i % 4 != 2 else f"{topic}-k{p}-{round_}-{i}"
        value = None if i % 4 == 2 else f"v-{p}-{round_}-{i}-" + "x" * (i * 17)
        out.append((key, value))
    if p == 1 and round_ == 1:
        out.append(("big", "B" * BIG_BYTES))
    return out


def _produce(bootstrap: str, topic: str, codec: str, p: int, recs: list[tuple[str | None, str | None]],
             headers: list[str]) -> None:
    data = "".join(
        (f"{k}:" if k is not None else "") + (v or "") + "\n" for k, v in recs
    ).encode()
    hargs = [a for h in headers for a in ("-H", h)]
    _kcat(bootstrap, "-P", "-t", topic, "-p", str(p), "-K", ":", "-Z",
          "-X", f"compression.codec={codec}", "-X", "message.max.bytes=1048576", *hargs,
          stdin=data)


def test_kcat_conformance(server: Tidegate) -> None:
    bootstrap = server.bootstrap
    expected: dict[str, dict[int, list[tuple[str | None, str | None, str]]]] = {}
    cut: dict[str, int] = {}
    for codec in CODECS:
        topic = f"kc-{codec}"
        expected[topic] = {p: [] for p in range(PARTITIONS)}
        for p in range(PARTITIONS):
            recs = _lines(topic, p, 0)
            _produce(bootstrap, topic, codec, p, recs, ["h1=one", "h2=two"])
            expected[topic][p] += [(k, v, "h1=one,h2=two") for k, v in recs]
        time.sleep(0.05)
        cut[topic] = int(time.time() * 1000)
        time.sleep(0.05)
        for p in range(PARTITIONS):
            recs = _lines(topic, p, 1)
            _produce(bootstrap, topic, codec, p, recs, [])
            expected[topic][p] += [(k, v, "") for k, v in recs]

    listing = _kcat(bootstrap, "-L")
    assert "1 brokers" in listing and "broker 0 at " + bootstrap in listing
    for topic in expected:
        assert f'topic "{topic}" with {PARTITIONS} partitions' in listing

    server.restart()

    for topic, parts in expected.items():
        out = _kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-Z",
                    "-f", "%p\t%o\t%k\t%s\t%h\t%T\n")
        got: dict[int, list[tuple[int, str | None, str | None, str, int]]] = {}
        for line in out.splitlines():
            p, o, k, v, h, ts = line.split("\t")
            got.setdefault(int(p), []).append(
                (int(o), None if k == "NULL" else k, None if v == "NULL" else v, h, int(ts))
            )
        for p in range(PARTITIONS):
            rows = sorted(got[p])
            assert [r[0] for r in rows] == list(range(len(parts[p]))), (topic, p)
            assert [(r[1], r[2], r[3]) for r in rows] == parts[p], (topic, p)
            stamps = [r[4] for r in rows]
            assert stamps == sorted(stamps)
            first_round_b = len(_lines(topic, p, 0))
            assert stamps[first_round_b - 1] < cut[topic] <= stamps[first_round_b]
            query = _kcat(bootstrap, "-Q", "-t", f"{topic}:{p}:{cut[topic]}")
            assert f"{topic} [{p}] offset {first_round_b}" in query, query
            query = _kcat(bootstrap, "-Q", "-t", f"{topic}:{p}:{stamps[-1] + 10**7}")
            assert f"{topic} [{p}] offset -1" in query, query
