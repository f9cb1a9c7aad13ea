"""Behaviour specific to ``FileDurableDataLog``: crashes, torn tails, corruption, files."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tidegate.core.segmentstore.tier1.api import (
    DataLogCorruptError,
    DataLogError,
    DataLogFencedError,
    LogAddress,
)
from tidegate.core.segmentstore.tier1.fileformat import (
    FILE_HEADER,
    FILE_HEADER_BYTES,
    FILE_MAGIC,
    entry_crc,
    list_log_files,
    list_spares,
    log_file_name,
)
from tidegate.core.segmentstore.tier1.filelog import FileDurableDataLog

from tests.tier1.appender_child import payload

REPO = Path(__file__).resolve().parents[2]


async def _entries(d: Path, **kw: int) -> list[tuple[LogAddress, bytes]]:
    log = FileDurableDataLog(d, **kw)
    await log.open()
    try:
        return [item async for item in log.read()]
    finally:
        await log.close()


async def _write(d: Path, entries: list[bytes], **kw: int) -> list[LogAddress]:
    log = FileDurableDataLog(d, **kw)
    await log.open()
    addrs = [await log.append(e) for e in entries]
    await log.close()
    return addrs


async def test_kill_9_keeps_every_acknowledged_entry(tmp_path: Path) -> None:
    d = tmp_path / "log"
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tier1.appender_child", str(d)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        acked: list[tuple[int, LogAddress]] = []
        deadline = time.monotonic() + 30
        while len(acked) < 300 + 100 * round_:
            line = proc.stdout.readline()
            assert line, f"child exited early with {proc.poll()}"
            i, fid, pos = map(int, line.split())
            acked.append((i, LogAddress(fid, pos)))
            assert time.monotonic() < deadline
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # Lines written before the kill but not yet read are acknowledgements too.
        for line in proc.stdout.read().splitlines():
            i, fid, pos = map(int, line.split())
            acked.append((i, LogAddress(fid, pos)))
        proc.stdout.close()
        got = await _entries(d)
        mine = [(a, data) for a, data in got if a.file_id >= acked[0][1].file_id]
        # Every acknowledged entry is there, intact, at its address, in order; what
        # follows is a prefix of the unacknowledged appends, each one whole.
        assert len(mine) >= len(acked)
        for k, (a, data) in enumerate(mine):
            assert data == payload(k), f"entry {k} at {a} damaged"
            if k < len(acked):
                assert a == acked[k][1]
                assert acked[k][0] == k


async def test_torn_tail_is_cut(tmp_path: Path) -> None:
    d = tmp_path / "log"
    expected: list[bytes] = []
    for tail in (b"\x00\x00\x00", b"\x00\x00\x00\x09\x12\x34\x56\x78abc", bytes(4096)):
        entries = [b"one", b"two", tail[:2]]
        addrs = await _write(d, entries)
        expected += entries
        path = d / log_file_name(addrs[-1].file_id)
        good_size = path.stat().st_size
        with open(path, "ab") as f:
            f.write(tail)
        assert [data for _, data in await _entries(d)] == expected
        assert path.stat().st_size == good_size
        # The file's end is recorded now: bytes appended later are never read.
        with open(path, "ab") as f:
            f.write(b"\x00\x00\x00\x01")
        assert [data for _, data in await _entries(d)] == expected


async def test_bad_crc_at_the_tail_is_torn(tmp_path: Path) -> None:
    d = tmp_path / "log"
    addrs = await _write(d, [b"a" * 100, b"b" * 100, b"c" * 100])
    path = d / log_file_name(addrs[-1].file_id)
    with open(path, "r+b") as f:
        f.seek(addrs[-1].position + 8 + 50)
        f.write(b"X")
    assert [data for _, data in await _entries(d)] == [b"a" * 100, b"b" * 100]
    assert path.stat().st_size == addrs[-1].position


async def test_corrupt_middle_entry_fails_open(tmp_path: Path) -> None:
    d = tmp_path / "log"
    addrs = await _write(d, [b"a" * 100, b"b" * 100, b"c" * 100])
    path = d / log_file_name(addrs[1].file_id)
    with open(path, "r+b") as f:
        f.seek(addrs[1].position + 8 + 10)
        f.write(b"X")
    log = FileDurableDataLog(d)
    with pytest.raises(DataLogCorruptError):
        await log.open()


async def test_corrupt_entry_in_closed_file_fails_read(tmp_path: Path) -> None:
    d = tmp_path / "log"
    entries = [bytes([i]) * 100 for i in range(10)]
    addrs = await _write(d, entries, file_bytes_max=400)
    assert len({a.file_id for a in addrs}) > 2
    victim = addrs[1]
    with open(d / log_file_name(victim.file_id), "r+b") as f:
        f.seek(victim.position + 8 + 3)
        f.write(b"\xff")
    log = FileDurableDataLog(d)
    await log.open()
    with pytest.raises(DataLogCorruptError):
        _ = [item async for item in log.read()]
    # Reading from past the damage works.
    assert [data async for _, data in log.read(addrs[4])] == entries[4:]
    await log.close()


async def test_missing_file_is_corruption(tmp_path: Path) -> None:
    d = tmp_path / "log"
    addrs = await _write(d, [bytes([i]) * 100 for i in range(6)], file_bytes_max=250)
    (d / log_file_name(addrs[2].file_id)).unlink()
    log = FileDurableDataLog(d)
    await log.open()
    with pytest.raises(DataLogCorruptError):
        _ = [item async for item in log.read()]
    await log.close()


async def test_rolling_and_truncation_delete_files(tmp_path: Path) -> None:
    d = tmp_path / "log"
    log = FileDurableDataLog(d, file_bytes_max=FILE_HEADER_BYTES + 3 * 108)
    await log.open()
    addrs = [await log.append(bytes([i]) * 100) for i in range(12)]
    files = sorted({a.file_id for a in addrs})
    assert len(files) == 4
    assert [sum(a.file_id == f for a in addrs) for f in files] == [3, 3, 3, 3]
    await log.truncate(addrs[7])
    assert list_log_files(d) == files[2:]
    assert [data async for _, data in log.read()] == [bytes([i]) * 100 for i in range(7, 12)]
    await log.truncate(addrs[3])  # behind the start: nothing changes
    assert list_log_files(d) == files[2:]
    await log.close()
    got = await _entries(d)
    assert [a for a, _ in got] == addrs[7:]
    # The reopen started a new file; the old owner's last file is kept (it has entries).
    assert list_log_files(d)[:2] == files[2:]


async def test_open_starts_a_new_file_per_epoch(tmp_path: Path) -> None:
    d = tmp_path / "log"
    a1 = await _write(d, [b"x"])
    a2 = await _write(d, [b"y"])
    assert a2[0].file_id > a1[0].file_id
    assert a2[0] > a1[0]
    assert [data for _, data in await _entries(d)] == [b"x", b"y"]


async def test_fenced_owner_cannot_roll(tmp_path: Path) -> None:
    d = tmp_path / "log"
    old = FileDurableDataLog(d, file_bytes_max=200)
    await old.open()
    await old.append(b"a" * 100)
    new = FileDurableDataLog(d)
    await new.open()
    with pytest.raises(DataLogFencedError):
        await old.append(b"b" * 150)
    await old.close()
    await new.append(b"c")
    await new.close()
    assert [data for _, data in await _entries(d)] == [b"a" * 100, b"c"]


async def test_large_entries_and_many_in_flight(tmp_path: Path) -> None:
    import asyncio

    d = tmp_path / "log"
    log = FileDurableDataLog(d, file_bytes_max=3 << 20, in_flight_bytes_max=2 << 20)
    await log.open()
    big = [os.urandom(1 << 20) for _ in range(5)]
    small = [os.urandom(100) for _ in range(3000)]
    mixed = [*big[:2], *small, *big[2:]]
    addrs = await asyncio.gather(*(log.append(memoryview(e)) for e in mixed))
    assert list(addrs) == sorted(addrs)
    await log.close()
    assert [data for _, data in await _entries(d)] == mixed


async def test_owner_fenced_while_appending_loses_nothing_it_acknowledged(tmp_path: Path) -> None:
    """A second owner opens while the first is appending as fast as it can: the first
    fails with ``DataLogFencedError`` (on the epoch file it rereads after every sync),
    and every entry it acknowledged before that is in the second owner's log."""
    d = tmp_path / "log"
    for attempt in range(5):
        await _fence_while_appending(d, attempt)
    assert (d / "epoch").stat().st_size == 8


async def _fence_while_appending(d: Path, attempt: int) -> None:
    import asyncio

    old = FileDurableDataLog(d, file_bytes_max=64 * 1024)
    await old.open()
    acked: list[bytes] = []
    fenced: list[Exception] = []
    stop = asyncio.Event()

    async def appender(w: int) -> None:
        i = 0
        while not stop.is_set():
            entry = b"%d-%d-%d:" % (attempt, w, i) + bytes(100 + i % 900)
            try:
                await old.append(entry)
            except DataLogError as exc:  # fenced, or closed by the fencing failure
                fenced.append(exc)
                return
            acked.append(entry)
            i += 1

    tasks = [asyncio.ensure_future(appender(w)) for w in range(8)]
    await asyncio.sleep(0.05)
    new = FileDurableDataLog(d, file_bytes_max=64 * 1024)
    await new.open()
    await asyncio.sleep(0.05)
    with pytest.raises(DataLogError):
        await old.append(b"late")
    stop.set()
    await asyncio.gather(*tasks)
    assert any(isinstance(e, DataLogFencedError) for e in fenced), fenced
    await old.close()
    kept = {data async for _, data in new.read()}
    await new.close()
    assert acked and not [e for e in acked if e not in kept]


# -- spare files (reused log files) -------------------------------------------------------


def _parse_child_line(
    acked: dict[int, LogAddress], spares: list[tuple[int, int]], line: str
) -> None:
    if line.startswith("spares "):
        _, before, after = line.split()
        spares.append((int(before), int(after)))
        return
    i, fid, pos = map(int, line.split())
    acked[i] = LogAddress(fid, pos)


async def test_kill_9_while_rolls_reuse_spare_files(tmp_path: Path) -> None:
    """The child truncates as it goes, so most rolls take a spare file still full of
    entries of its earlier life; after ``kill -9`` every acknowledged entry that was not
    truncated away reads back at its address, and nothing stale shows up."""
    d = tmp_path / "log"
    for _round in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tier1.appender_child", str(d), "truncate"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        acked: dict[int, LogAddress] = {}
        spares: list[tuple[int, int]] = []
        parse = functools.partial(_parse_child_line, acked, spares)
        deadline = time.monotonic() + 60
        while len(acked) < 1500:
            line = proc.stdout.readline()
            assert line, f"child exited early with {proc.poll()}"
            parse(line)
            assert time.monotonic() < deadline
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout.read().splitlines():
            parse(line)
        proc.stdout.close()
        got = await _entries(d)
        first_of_child = min(acked.values())
        mine = [(a, data) for a, data in got if a >= first_of_child]
        indices = [int.from_bytes(data[:8], "big") for _, data in mine]
        for (a, data), k in zip(mine, indices, strict=True):
            assert data == payload(k), f"entry at {a} damaged or stale"
            if k in acked:
                assert a == acked[k]
        # Contiguous, in order, and reaching past the last acknowledgement; truncation
        # only ever removes entries 300 and more below the newest.
        assert indices == list(range(indices[0], indices[0] + len(indices)))
        assert indices[0] <= max(acked) - 300 + 1
        assert indices[-1] >= max(acked)
        # Truncations kept spares and later rolls took them.
        # Truncations kept spares, and rolls between them took some.
        assert any(after > 0 for _, after in spares)
        assert any(before < prev_after for (_, prev_after), (before, _) in zip(spares, spares[1:], strict=False))


async def test_rolls_take_spares_and_stale_entries_stay_hidden(tmp_path: Path) -> None:
    d = tmp_path / "log"
    log = FileDurableDataLog(d, file_bytes_max=FILE_HEADER_BYTES + 3 * 108, spare_files=2)
    await log.open()
    addrs = [await log.append(bytes([i]) * 100) for i in range(12)]
    await log.truncate(addrs[9])  # files 1-3 (of this epoch) go
    spares = list_spares(d)
    assert len(spares) == 2  # one was deleted: two spares at most
    inodes = {os.stat(d / n).st_ino for n in spares}
    # Five entries of the same size: the second reused file gets two, and its third
    # slot still holds a whole entry of its earlier life, at an entry boundary.
    more = [await log.append(bytes([100 + i]) * 100) for i in range(5)]
    assert list_spares(d) == []
    new_files = sorted({a.file_id for a in more})
    assert len(new_files) == 2
    assert {os.stat(d / log_file_name(f)).st_ino for f in new_files} == inodes
    expected = [bytes([i]) * 100 for i in range(9, 12)] + [bytes([100 + i]) * 100 for i in range(5)]
    assert [data async for _, data in log.read()] == expected
    await log.close()
    # A new owner scans the last file for its end: the stale entry after the new ones
    # fails its CRC under the new file id, so only what this life wrote is there.
    assert [data for _, data in await _entries(d)] == expected


async def test_files_of_an_earlier_owner_are_deleted_not_kept(tmp_path: Path) -> None:
    """A fenced owner may still write into its file once more: reusing it could let
    that write land over a newer owner's entries."""
    d = tmp_path / "log"
    addrs = await _write(d, [bytes([i]) * 100 for i in range(6)], file_bytes_max=FILE_HEADER_BYTES + 3 * 108)
    log = FileDurableDataLog(d, file_bytes_max=FILE_HEADER_BYTES + 3 * 108)
    await log.open()
    mine = [await log.append(bytes([50 + i]) * 100) for i in range(6)]
    await log.truncate(mine[-1])
    assert all(f not in list_log_files(d) for f in {a.file_id for a in addrs})
    kept = list_spares(d)
    assert kept and all(int(n.split("-")[1]) >= mine[0].file_id for n in kept)
    await log.close()


async def test_crash_during_claim_leaves_no_shared_spare(tmp_path: Path) -> None:
    d = tmp_path / "log"
    log = FileDurableDataLog(d, file_bytes_max=FILE_HEADER_BYTES + 3 * 108)
    await log.open()
    addrs = [await log.append(bytes([i]) * 100) for i in range(9)]
    await log.truncate(addrs[-1])
    await log.close()
    spare = d / list_spares(d)[0]
    last = max(list_log_files(d))
    os.link(spare, d / log_file_name(last + 1))  # claimed, spare name not yet removed
    got = await _entries(d)
    assert [data for _, data in got] == [bytes([8]) * 100]
    assert spare.name not in list_spares(d)


async def test_format_1_files_are_read(tmp_path: Path) -> None:
    """Files written before entry CRCs were seeded with the file id still read back
    (and are never reused as spares)."""
    d = tmp_path / "log"
    d.mkdir()
    entries = [b"old-1", b"old-two"]
    body = bytearray(FILE_HEADER.pack(FILE_MAGIC, 1, 1))
    for e in entries:
        length = len(e).to_bytes(4, "big")
        body += length + entry_crc(0, length, e).to_bytes(4, "big") + e
    (d / log_file_name(1)).write_bytes(bytes(body))
    assert [data for _, data in await _entries(d)] == entries
    log = FileDurableDataLog(d)
    await log.open()
    addr = await log.append(b"new")
    await log.truncate(addr)
    assert list_spares(d) == []
    await log.close()


async def test_synced_bytes_leave_the_page_cache_in_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once ``drop_written_bytes`` have been synced the writer asks the kernel to drop
    them (one call per step, the ranges back to back, the old file's tail at a roll),
    and the entries read back the same."""
    import tidegate.core.segmentstore.tier1.filelog as filelog

    drops: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_DONTNEED:
            drops.append((fd, offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(filelog.os, "posix_fadvise", record)
    d = tmp_path / "log"
    entries = [os.urandom(10_000) for _ in range(40)]
    log = FileDurableDataLog(d, file_bytes_max=300_000, drop_written_bytes=50_000)
    await log.open()
    for e in entries:
        await log.append(memoryview(e))  # one sync each
    await log.close()
    assert [data for _, data in await _entries(d)] == entries
    assert 6 <= len(drops) <= 12
    by_fd: dict[int, list[tuple[int, int]]] = {}
    for fd, offset, length in drops:
        by_fd.setdefault(fd, []).append((offset, length))
    assert len(by_fd) >= 2  # a roll happened, and dropped the old file's tail
    for ranges in by_fd.values():
        assert ranges[0][0] == 0 or ranges[0][0] == FILE_HEADER_BYTES
        for (o1, n1), (o2, _) in zip(ranges, ranges[1:], strict=False):
            assert o1 + n1 == o2


async def test_on_done_is_called_by_the_completion_itself(tmp_path: Path) -> None:
    """``on_done`` runs inside the completion the writer hands to the event loop (for a
    written batch and for a failed one), not one event-loop hop later. One that raises is
    reported to the loop's exception handler, and the batch's other appends still
    complete and call theirs."""
    import asyncio

    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["exception"]))
    log = FileDurableDataLog(tmp_path / "log")
    await log.open()
    inside: list[str] = []

    def tracked(name: str, completion: Callable[..., None]) -> Callable[..., None]:
        def run(*args: object) -> None:
            inside.append(name)
            try:
                completion(*args)
            finally:
                inside.pop()

        return run

    log._on_written = tracked("written", log._on_written)  # type: ignore[method-assign]
    log._on_failed = tracked("failed", log._on_failed)  # type: ignore[method-assign]
    calls: list[tuple[list[str], bool]] = []

    def on_done(fut: asyncio.Future[LogAddress]) -> None:
        calls.append((list(inside), fut.exception() is None))
        if len(calls) == 1:
            raise RuntimeError("a callback's own bug")

    futs = [log.append_future(b"x%d" % i, on_done) for i in range(4)]
    await asyncio.gather(*futs)
    assert calls == [(["written"], True)] * 4
    assert [type(e) for e in reported] == [RuntimeError]

    rival = FileDurableDataLog(tmp_path / "log")
    await rival.open()  # fences ``log``: its next batch fails
    calls.clear()
    with pytest.raises(DataLogFencedError):
        await log.append_future(b"late", on_done)
    assert calls == [(["failed"], False)]
    await log.close()
    await rival.close()
