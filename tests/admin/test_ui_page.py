"""The ``/ui`` page (issue 28) rendered by headless Chromium (Debian's ``chromium``)
against a real ``tidegate serve``: a Kafka topic with a consumer group's lag, and a
stream scaled twice drawn as its segments over time; the test checks the page's DOM
and the screenshot's pixels."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from PIL import Image

from tests.admin.test_kafka_exporter import COMMITTED, SENT, TOPIC, _consume_and_commit, _produce
from tests.clients.autoscale_load import create_topic
from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(180)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: The page's colours of segments 3 and 4 (``ui.html``'s PALETTE): only the scaled
#: stream has such segments.
SEGMENT_RGB = [(0xD6, 0x27, 0x28), (0x94, 0x67, 0xBD)]




def _chromium(*args: str, timeout_s: float = 90) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM, "chromium is not installed (scripts/system-deps.sh installs it)"
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--disable-dev-shm-usage", "--virtual-time-budget=8000", *args],
        capture_output=True, timeout=timeout_s, check=True,
    )


def _scaled_stream(rest: str) -> None:
    """``ui/scaled``: one segment, split in two, then the upper half split again."""
    httpx.post(f"{rest}/v1/scopes", json={"scopeName": "ui"}, timeout=10).raise_for_status()
    httpx.post(f"{rest}/v1/scopes/ui/streams", json={"streamName": "scaled"},
               timeout=10).raise_for_status()
    for sealed, ranges in (([0], [[0.0, 0.5], [0.5, 1.0]]), ([(1 << 32) | 2], [[0.5, 0.75], [0.75, 1.0]])):
        time.sleep(0.3)  # each epoch a visible width
        r = httpx.post(f"{rest}/v1/scopes/ui/streams/scaled/scale",
                       json={"sealedSegments": sealed, "newKeyRanges": ranges}, timeout=30)
        assert r.status_code == 200, r.text


def test_ui_page_in_chromium(rest_server: Tidegate, tmp_path: Path) -> None:
    server = rest_server
    rest = f"http://127.0.0.1:{server.rest_port}"
    create_topic(server.bootstrap, TOPIC, 3, {})
    _produce(server.bootstrap)
    member, _ = _consume_and_commit(server.bootstrap, "ui-group")
    member.close()
    for group in ("sink.10", "sink.2", "sink.1"):
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group})
        c.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        c.close()
    _scaled_stream(rest)
    overview = httpx.get(f"{rest}/ui/overview.json", timeout=10).json()
    assert overview["status"] == "ready"
    # Groups in natural order; each band of a topic's stream names its partitions.
    names = [g["group"] for g in overview["kafka"]["groups"]]
    assert [n for n in names if n.startswith("sink.")] == ["sink.1", "sink.2", "sink.10"]
    kafka = next(sc for sc in overview["scopes"] if sc["scope"] == "kafka")
    topic = next(s for s in kafka["streams"] if s["stream"] == TOPIC)
    assert sorted(p for seg in topic["epochs"][-1]["segments"] for p in seg["partitions"]) == [
        0, 1, 2]

    dom = _chromium("--dump-dom", f"{rest}/ui").stdout.decode()
    assert 'data-loaded="1"' in dom
    assert f"<td>{TOPIC}</td>" in dom
    lag = sum(SENT[p] - o for p, o in COMMITTED.items())
    assert f'<td>ui-group</td><td class="n">0</td><td class="n">{lag}</td>' in dom
    assert 'data-stream="ui/scaled"' in dom
    drawn = dom.split('data-stream="ui/scaled"', 1)[1].split("</svg>", 1)[0]
    # Epoch 0: segment 0; epoch 1: segments 1 and 2; epoch 2: 1, 3 and 4.
    assert drawn.count("<rect") == 1 + 2 + 3
    assert 'data-segment="4" data-epoch="2"' in drawn
    assert drawn.count('class="tick"') == 6  # the time axis: start, 4 between, now
    bands = dom.split(f'data-stream="kafka/{TOPIC}"', 1)[1].split("</svg>", 1)[0]
    for p in range(3):
        assert f'data-partitions="{p}"' in bands, bands
    assert dom.index("<td>sink.2</td>") < dom.index("<td>sink.10</td>")

    shot = tmp_path / "ui.png"
    _chromium(f"--screenshot={shot}", "--window-size=1000,2000", f"{rest}/ui")
    image = Image.open(shot).convert("RGB")
    counts = {rgb: n for n, rgb in image.getcolors(maxcolors=1 << 24) or []}
    for rgb in SEGMENT_RGB:
        assert counts.get(rgb, 0) > 500, (rgb, sorted(counts.items(), key=lambda kv: -kv[1])[:12])
