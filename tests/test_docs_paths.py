"""Every repository path the documents name in backticks exists (issue 34, item 5), so a
reader who opens what ``docs/`` and the README point at finds it.

A backticked word is taken for a path when it names a source or document file
(``gateway/cli.py``, ``seeds.md``) or a folder (``gateway/txn/``). It resolves from the
repository root, from the document's folder, or as the tail of a path in the repository
(``durablelog/frames.py`` under the ``core/segmentstore/`` a sentence names just before).
All misses are reported at once, each as ``file:line``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Extensions of files the documents point readers at (data files such as ``meta.json``
#: are the data directory's, not the repository's).
EXTENSIONS = (".py", ".md", ".toml", ".proto", ".yml", ".yaml", ".sh", ".c", ".ini", ".java",
              ".cfg", ".txt", ".pyx")
_SKIP_DIRS = {".git", ".venv", ".lint", "__pycache__", "node_modules", ".tox", ".mypy_cache",
              ".pytest_cache", ".ruff_cache", "build", "dist"}
#: The data directory's layout (``docs/operations.md``), not the repository's.
DATA_DIR = ("segmentstore/", "gateway/index/", "plog/")
#: Kafka's own command-line tools (``kafka-topics.sh``).
_KAFKA_TOOL = re.compile(r"kafka-[a-z-]+\.sh")
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*/?")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _repository_paths() -> set[str]:
    """Every file and folder of the checkout, relative to its root (``a/b.py``, ``a/``)."""
    out: set[str] = set()
    for here, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        rel = Path(here).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else rel + "/"
        out.update(prefix + d + "/" for d in dirs)
        out.update(prefix + f for f in files)
    return out


def _is_path(word: str) -> bool:
    if not _PATH.fullmatch(word) or word.startswith(("/", ".")) or "//" in word:
        return False
    if word.startswith(DATA_DIR) or _KAFKA_TOOL.fullmatch(word):
        return False
    return word.endswith("/") and "/" in word[:-1] or word.endswith(EXTENSIONS) and not (
        word[0].isdigit()  # a version such as ``3.9.0`` is not a file
    )


def _exists(word: str, document: Path, paths: set[str]) -> bool:
    here = document.parent.relative_to(ROOT).as_posix()
    candidates = [word, os.path.normpath(f"{here}/{word}") + ("/" if word.endswith("/") else "")]
    if any(c in paths for c in candidates):
        return True
    tail = "/" + word
    return any(p.endswith(tail) for p in paths)


def test_every_backticked_path_exists() -> None:
    paths = _repository_paths()
    missing = []
    for document in _documents():
        text = document.read_text(encoding="utf-8")
        fenced = False
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced:
                continue
            for word in _CODE.findall(line):
                if _is_path(word) and not _exists(word, document, paths):
                    missing.append(f"{document.relative_to(ROOT)}:{number}: `{word}`")
    assert not missing, "paths named in the documents that do not exist:\n" + "\n".join(missing)
