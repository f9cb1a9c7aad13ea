"""Spark conformance tests share the Java fixtures of ``tests/java`` (the jars, javac,
a ``tidegate serve`` process)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.java.conftest import java, tidegate_groups  # noqa: E402, F401
