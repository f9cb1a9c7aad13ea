"""Spark's Python workers run ``PYSPARK_PYTHON`` (issue 34, item 1): a user who points it
at an interpreter without tidegate gets, from ``register(spark)``, one clear error naming
``PYSPARK_PYTHON`` and what to set, not a ``No module named 'tidegate'`` from a task later.
A real local Spark session in a process of its own, as the user starts it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

USER_SCRIPT = """
from pyspark.sql import SparkSession
from tidegate.spark import register

spark = SparkSession.builder.master("local[1]").getOrCreate()
try:
    register(spark)
finally:
    spark.stop()
"""


def test_a_worker_python_without_tidegate_is_named(tmp_path: Path) -> None:
    # An interpreter outside this venv: Debian's, which has no tidegate.
    other = shutil.which("python3", path="/usr/bin:/bin")
    assert other is not None
    probe = subprocess.run([other, "-c", "import tidegate.spark"], capture_output=True,
                           cwd=tmp_path, timeout=60)
    assert probe.returncode != 0, "this test needs a python3 on /usr/bin without tidegate"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PYSPARK_PYTHON"] = other
    done = subprocess.run([sys.executable, "-c", USER_SCRIPT], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=200)
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert "PYSPARK_PYTHON" in last and "cannot import tidegate.spark" in last, done.stderr[-3000:]
    assert sys.executable in last  # the interpreter that has it, to set instead
