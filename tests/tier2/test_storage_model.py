"""Random operation sequences: ``FileSystemStorage`` (reopened now and then, tiny chunks)
must answer exactly like the ``InMemoryStorage`` reference model."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
from tidegate.tier2.api import StorageError
from tidegate.tier2.filesystem import FileSystemStorage
from tidegate.tier2.inmemory import InMemoryStorage

NAMES = ["a", "b/c", "b/c#txn.1", "d.e"]


def _outcome(fn: object, *args: object) -> object:
    try:
        return ("ok", fn(*args))  # type: ignore[operator]
    except StorageError as e:
        return ("error", type(e).__name__)


@pytest.mark.parametrize("seed", range(6))
def test_filesystem_matches_model(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    model = InMemoryStorage()
    root = tmp_path / "t2"
    chunk = rnd.choice([1, 3, 8, 64])
    real = FileSystemStorage(root, chunk_bytes_max=chunk)
    for step in range(250):
        name = rnd.choice(NAMES)
        info = _outcome(model.get_info, name)
        length = info[1].length if info[0] == "ok" else 0  # type: ignore[index,attr-defined]
        start = info[1].start_offset if info[0] == "ok" else 0  # type: ignore[index,attr-defined]
        op = rnd.choice(
            [
                "create",
                "write",
                "write",
                "write",
                "read",
                "read",
                "seal",
                "truncate",
                "concat",
                "delete",
                "reopen",
            ]
        )
        if op == "reopen":
            real = FileSystemStorage(root, chunk_bytes_max=rnd.choice([1, 3, 8, 64]))
            continue
        if op == "write":
            off = length if rnd.random() < 0.9 else length + rnd.choice([-1, 1])
            args: tuple[object, ...] = (name, off, rnd.randbytes(rnd.randrange(0, 20)))
        elif op == "read":
            off = rnd.randrange(max(0, start - 2), length + 2)
            args = (name, off, rnd.randrange(0, max(1, length - off + 2)))
        elif op == "truncate":
            args = (name, rnd.randrange(0, length + 2))
        elif op == "concat":
            args = (name, length, rnd.choice(NAMES))
        else:
            args = (name,)
        if op == "write":  # synced or not, nothing a reader sees may differ
            durable = rnd.random() < 0.5
            expected = _outcome(functools.partial(model.write, durable=durable), *args)
            got = _outcome(functools.partial(real.write, durable=durable), *args)
        else:
            expected = _outcome(getattr(model, op), *args)
            got = _outcome(getattr(real, op), *args)
        assert got == expected, f"seed {seed} step {step}: {op}{args[:2]}"
        assert list(real.list_segments()) == list(model.list_segments())
    for name in model.list_segments():
        info = model.get_info(name)
        assert real.get_info(name) == info
        n = info.length - info.start_offset
        assert real.read(name, info.start_offset, n) == model.read(name, info.start_offset, n)
