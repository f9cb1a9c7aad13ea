"""py-spy profiles of the tidegate server, and where their samples fall.

`PySpy` attaches `py-spy record --nonblocking` (the target is never paused) to a pid and
stops it with SIGINT, which makes py-spy write its output. The raw format is one line per
distinct stack, `outer;...;inner COUNT`, each frame `function (file:line)`.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_LINE_NO = re.compile(r":\d+\)$")
_PROJECT_DIRS = ("gateway/", "core/", "protocol/", "tier2/")


def py_spy_executable() -> Path:
    exe = Path(sys.executable).parent / "py-spy"
    if exe.exists():
        return exe
    found = shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
    return Path(found)


class PySpy:
    def __init__(self, pid: int, raw_path: Path, rate_hz: int = 100) -> None:
        self.raw_path = raw_path
        self.log_path = raw_path.with_suffix(".log")
        raw_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(py_spy_executable()), "record", "--pid", str(pid), "--rate", str(rate_hz),
                "--format", "raw", "--nonblocking", "--output", str(raw_path)]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop sampling and wait for the output file; raises if py-spy failed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.raw_path.exists():
            raise RuntimeError(f"py-spy wrote no profile: {self.log_path.read_text()[-500:]}")


def _is_project_frame(frame: str) -> bool:
    """A frame in tidegate's own packages, other than the CLI's entry (on every stack)."""
    file = frame[frame.rfind("(") + 1 :]
    return file.startswith(_PROJECT_DIRS) and not file.startswith("gateway/cli.py")


def summarize(raw_path: Path, top: int = 12) -> dict[str, Any]:
    """Total samples; the functions with most samples on top of the stack (self time,
    any code), and tidegate's own functions with most samples anywhere on the stack
    (inclusive time); as percentages of all samples. Line numbers are folded."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw_path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_LINE_NO.sub(")", f) for f in stack.split(";") if not f.startswith("process ")]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for f in set(frames):
            if _is_project_frame(f):
                inclusive[f] += count

    def pct(c: Counter[str]) -> list[tuple[str, float]]:
        return [(f, 100.0 * n / total) for f, n in c.most_common(top)] if total else []

    return {"samples": total, "self_pct": pct(own), "inclusive_pct": pct(inclusive)}
