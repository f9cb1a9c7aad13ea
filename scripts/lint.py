"""The lint environment's type and import checks over the installed layout.

mypy and import-linter find modules by directory, and the product's folders are
``tidegate.*`` only through setup.py's package-dir mapping (an import hook in an editable
install, which neither tool follows). So both run over a copy laid out as the wheel
installs it (``.lint/tidegate/gateway/...``); mypy's paths are mapped back to the
checkout's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("gateway", "core", "protocol", "tier2", "spark")
#: mypy strict covers every package.
TYPED = ("protocol", "core", "tier2", "gateway", "spark")


def build_tree(dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "grpc_gen")
    shutil.copytree(ROOT / "tidegate", dest / "tidegate", ignore=ignore)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, dest / "tidegate" / folder, ignore=ignore)
    return dest


def main() -> int:
    tree = build_tree(ROOT / ".lint")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    config = str(ROOT / "pyproject.toml")
    bin_dir = Path(sys.executable).parent  # the lint environment's tools
    imports = subprocess.run([str(bin_dir / "lint-imports"), config, "--no-cache"], cwd=tree, env=env)
    mypy_args = [str(bin_dir / "mypy"), "--config-file", config, *(f"-p=tidegate.{p}" for p in TYPED)]
    mypy = subprocess.run(mypy_args, cwd=tree, env=env, capture_output=True, text=True)
    copied = re.compile(r"^tidegate/(" + "|".join(FOLDERS) + r")/", re.M)
    sys.stdout.write(copied.sub(r"\1/", mypy.stdout))
    sys.stderr.write(mypy.stderr)
    return imports.returncode or mypy.returncode


if __name__ == "__main__":
    sys.exit(main())
