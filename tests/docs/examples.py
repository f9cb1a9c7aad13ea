"""The Python code blocks of README.md and docs/*.md that a user is told to run, as
written, with only the example addresses and paths swapped for the test's own."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: A fence whose info string has this word is shown, not run (a fragment or a sketch).
NO_RUN = "no-run"
_FENCE = re.compile(r"^```(\S*)(.*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def python_blocks(path: Path) -> list[Block]:
    """Fenced ```python blocks not marked no-run, in the order of the file."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if fence.group(1) == "python" and NO_RUN not in fence.group(2):
            found.append(Block(path, start, "\n".join(lines[start:end]) + "\n"))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in markdown_files() for b in python_blocks(path)]


def adapt(code: str, bootstrap: str, grpc: str, tmp: Path) -> str:
    """The block with the test server's addresses for the docs' example ones."""
    return (code.replace("127.0.0.1:9092", bootstrap).replace("127.0.0.1:9090", grpc)
            .replace('"/tmp/', f'"{tmp}/'))
