"""The Python code blocks of README.md and docs/*.md that a user is told to run, and the
shell commands of their indented blocks (kcat, curl), as written, with only the example
addresses and paths swapped for the test's own."""

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


#: Commands a shell block may start with to be run by the tests (``make serve`` and the
#: usage synopsis are shown, not run: the first starts a server, the second is a grammar).
SHELL_TOOLS = ("kcat", "printf", "curl")


@dataclass(frozen=True)
class Command:
    """One shell command of an indented block, with what the document says it prints
    (the text before ``...`` of its output lines or of its trailing ``# comment``)."""

    line: int
    text: str
    expected: str


def shell_commands(path: Path) -> list[Command]:
    """The commands of the indented (4-space) blocks outside fences whose commands use
    ``SHELL_TOOLS``, in the order of the file. A block with ``$ `` prompts has its outputs
    between them; a block without is all commands."""
    lines = path.read_text().splitlines()
    blocks: list[list[tuple[int, str]]] = []
    fenced = False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("    ") and line.strip():
            if blocks and blocks[-1][-1][0] == number - 1:
                blocks[-1].append((number, line[4:]))
            elif number > 1 and not lines[number - 2].strip():
                blocks.append([(number, line[4:])])
    found: list[Command] = []
    for block in blocks:
        prompted = any(text.startswith("$ ") for _, text in block)
        commands: list[list[object]] = []  # [line, text, expected]
        continued = False  # the command before ends with a backslash
        for number, text in block:
            if continued:
                commands[-1][1] = f"{commands[-1][1]}\n{text}"
            elif not prompted or text.startswith("$ "):
                command = text[2:] if prompted else text
                code, _, comment = command.partition("    # ")
                commands.append([number, code.rstrip(), comment.partition("...")[0].strip()])
            else:  # an output line: its first one is what the command prints
                if commands and not commands[-1][2]:
                    commands[-1][2] = text.partition("...")[0].strip()
                continue
            continued = str(commands[-1][1]).endswith("\\")
        if commands and all(str(c[1]).split()[0] in SHELL_TOOLS for c in commands):
            found.extend(Command(int(str(c[0])), str(c[1]), str(c[2])) for c in commands)
    return found
