"""The installed layout: every module is under ``tidegate``; ``python -m tidegate`` is the
``tidegate`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tidegate import __version__

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_version_and_module_entry_point(tmp_path: Path) -> None:
    version = _run("-m", "tidegate", "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"tidegate {__version__}"
    assert __version__ != "0+unknown"
    help_ = _run("-m", "tidegate", "serve", "--help", cwd=tmp_path)
    assert help_.returncode == 0 and "--log-level" in help_.stdout


def test_only_tidegate_is_importable_outside_the_checkout(tmp_path: Path) -> None:
    code = (
        "import importlib.util as u;"
        "print([n for n in ('core', 'gateway', 'protocol', 'tier2', 'spark') if u.find_spec(n)]);"
        "import tidegate.core, tidegate.gateway, tidegate.protocol, tidegate.tier2, tidegate.spark"
    )
    done = _run("-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_unknown_log_level_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _run("-m", "tidegate", "serve", "--log-level", "verbose", cwd=tmp_path)
    assert done.returncode == 2
    assert "invalid choice: 'VERBOSE'" in done.stderr and "Traceback" not in done.stderr
