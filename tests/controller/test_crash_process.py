"""``kill -9`` a real controller process (on the durable segment store) in the middle of
scale and truncate workflows, restart, and check the stream is consistent with the
workflow completed."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

WORKER = [sys.executable, "-m", "tests.controller.crash_worker"]
ROOT = Path(__file__).resolve().parents[2]


def run_check(data_dir: Path) -> dict[str, object]:
    p = subprocess.run(
        [*WORKER, str(data_dir), "check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr
    result: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def test_kill_at_every_step_of_scale_and_truncate(tmp_path: Path) -> None:
    """The worker SIGKILLs itself at mutation k after setup; k walks through the first
    split and the first truncate (and a little past)."""
    pending = set()
    for k in range(0, 22):
        data = tmp_path / f"k{k}"
        p = subprocess.run(
            [*WORKER, str(data), "work", "7", str(k)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
        result = run_check(data)
        assert result["problems"] == [], result
        if result["pending"]:
            pending.add(result["pending"])
    # the kills did land inside both workflows
    assert pending == {"scale", "truncate"}, pending


def test_random_kill_rounds(tmp_path: Path) -> None:
    """Kill the looping worker at random moments, several rounds on one data dir."""
    rng = random.Random(11)
    data = tmp_path / "data"
    done_ops = 0
    for round_no in range(5):
        proc = subprocess.Popen(
            [*WORKER, str(data), "work", str(round_no), "-1"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        # let it complete a few operations, then kill it at a random moment of the next ones
        for _ in range(rng.randint(1, 4)):
            assert proc.stdout.readline().startswith("done")
            done_ops += 1
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, err
        done_ops += out.count("done")
        result = run_check(data)
        assert result["problems"] == [], result
    assert done_ops > 5
