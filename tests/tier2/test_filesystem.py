"""Behaviour specific to ``FileSystemStorage``: files on disk, damage, crash states."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tidegate.tier2 import filesystem as fs_module
from tidegate.tier2.api import DataMissingError, SegmentInfo, StorageError
from tidegate.tier2.filesystem import FileSystemStorage
from tidegate.tier2.fsmeta import META, META_NEXT, encode_name

from tests.tier2.writer_child import NAME, stream_bytes


def _chunks(root: Path, name: str) -> list[int]:
    d = root / encode_name(name)
    return sorted(int(f.split(".")[0]) for f in os.listdir(d) if f.endswith(".chunk"))


def _chunk_path(root: Path, name: str, start: int) -> Path:
    return root / encode_name(name) / f"{start:020d}.chunk"


def test_survives_reopen_and_rolls_chunks(tmp_path: Path) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    st.create("kafka/t/0.#epoch.3")
    data = bytes(range(256)) * 2
    for i in range(0, len(data), 33):
        st.write("kafka/t/0.#epoch.3", i, data[i : i + 33])
    st.seal("kafka/t/0.#epoch.3")
    assert _chunks(tmp_path, "kafka/t/0.#epoch.3") == list(range(0, 512, 10))
    again = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    assert again.get_info("kafka/t/0.#epoch.3") == SegmentInfo("kafka/t/0.#epoch.3", 512, 0, True)
    assert again.read("kafka/t/0.#epoch.3", 0, 512) == data
    assert list(again.list_segments()) == ["kafka/t/0.#epoch.3"]


def test_truncate_deletes_whole_chunks_only(tmp_path: Path) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    st.create("s")
    st.write("s", 0, bytes(45))
    st.truncate("s", 25)
    assert _chunks(tmp_path, "s") == [20, 30, 40]
    st.truncate("s", 30)
    assert _chunks(tmp_path, "s") == [30, 40]
    st.truncate("s", 45)
    assert _chunks(tmp_path, "s") == []
    st.write("s", 45, b"abc")
    assert _chunks(tmp_path, "s") == [45]
    assert FileSystemStorage(tmp_path).get_info("s") == SegmentInfo("s", 48, 45, False)


def test_truncate_frees_blocks_inside_the_first_kept_chunk(tmp_path: Path) -> None:
    """Space below the truncation point is freed at the filesystem's block grain (a hole
    punched in the chunk), not only by whole chunks; offsets and bytes after the point
    stay as they were."""
    st = FileSystemStorage(tmp_path, chunk_bytes_max=64 << 20)
    st.create("s")
    data = os.urandom(4 << 20)
    st.write("s", 0, data)
    path = _chunk_path(tmp_path, "s", 0)
    before = os.stat(path).st_blocks * 512
    assert before >= 4 << 20
    st.truncate("s", (3 << 20) + 100)
    after = os.stat(path).st_blocks * 512
    assert after <= (1 << 20) + 64 * 1024, (before, after)
    assert os.stat(path).st_size == 4 << 20
    assert st.read("s", (3 << 20) + 100, 1000) == data[(3 << 20) + 100 : (3 << 20) + 1100]
    st.write("s", 4 << 20, b"more")
    again = FileSystemStorage(tmp_path, chunk_bytes_max=64 << 20)
    assert again.read("s", (4 << 20) - 4, 8) == data[-4:] + b"more"


def test_names_map_to_safe_directories(tmp_path: Path) -> None:
    root = tmp_path / "t2"
    st = FileSystemStorage(root)
    names = [".", "..", "a/b", "../escape", "#", "x" * 1000, "ü/é", ""]
    for n in names:
        st.create(n)
        st.write(n, 0, n.encode() or b"-")
    for entry in root.iterdir():
        assert entry.parent == root
        assert len(entry.name) <= 255
    assert os.listdir(tmp_path) == ["t2"]
    assert list(FileSystemStorage(root).list_segments()) == sorted(names)
    for n in names:
        assert st.read(n, 0, len(n.encode() or b"-")) == (n.encode() or b"-")


def test_missing_middle_chunk_is_data_missing(tmp_path: Path) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    st.create("s")
    st.write("s", 0, bytes(range(30)))
    _chunk_path(tmp_path, "s", 10).unlink()
    assert st.read("s", 0, 10) == bytes(range(10))
    assert st.read("s", 20, 10) == bytes(range(20, 30))
    with pytest.raises(DataMissingError):
        st.read("s", 5, 10)
    with pytest.raises(DataMissingError):
        FileSystemStorage(tmp_path).read("s", 10, 1)


def test_short_chunk_is_data_missing_never_zeros(tmp_path: Path) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    st.create("s")
    st.write("s", 0, b"x" * 25)
    os.truncate(_chunk_path(tmp_path, "s", 10), 4)
    with pytest.raises(DataMissingError):
        st.read("s", 12, 3)
    assert st.read("s", 10, 4) == b"xxxx"
    # The last chunk cut short: this instance notices on write and on read.
    os.truncate(_chunk_path(tmp_path, "s", 20), 2)
    with pytest.raises(DataMissingError):
        st.read("s", 20, 5)
    with pytest.raises(DataMissingError):
        st.write("s", 25, b"y")
    assert os.path.getsize(_chunk_path(tmp_path, "s", 20)) == 2


def test_missing_last_chunk(tmp_path: Path) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    st.create("s")
    st.write("s", 0, b"x" * 15)
    _chunk_path(tmp_path, "s", 10).unlink()
    fresh = FileSystemStorage(tmp_path)
    assert fresh.exists("s")
    with pytest.raises(DataMissingError):
        fresh.get_info("s")
    fresh.delete("s")
    assert not fresh.exists("s")


def test_torn_write_shows_as_shorter_length(tmp_path: Path) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=100)
    st.create("s")
    st.write("s", 0, b"0123456789")
    # A crash in the middle of write("s", 10, b"abcdefgh") left only its prefix.
    with open(_chunk_path(tmp_path, "s", 0), "ab") as f:
        f.write(b"abc")
    fresh = FileSystemStorage(tmp_path, chunk_bytes_max=100)
    info = fresh.get_info("s")
    assert info.length == 13
    fresh.write("s", info.length, b"abcdefgh"[info.length - 10 :])
    assert fresh.read("s", 0, 18) == b"0123456789abcdefgh"


def test_failed_write_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    st.create("s")
    st.write("s", 0, b"a" * 7)
    real = os.fdatasync
    calls = {"n": 0}

    def failing(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(fs_module.os, "fdatasync", failing)
    with pytest.raises(StorageError):
        st.write("s", 7, b"b" * 20)
    monkeypatch.setattr(fs_module.os, "fdatasync", real)
    for view in (st, FileSystemStorage(tmp_path, chunk_bytes_max=10)):
        assert view.get_info("s").length == 7
        assert view.read("s", 0, 7) == b"a" * 7
    assert _chunks(tmp_path, "s") == [0]
    st.write("s", 7, b"b" * 20)
    assert st.read("s", 0, 27) == b"a" * 7 + b"b" * 20


def test_metadata_replace_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    st.create("s")
    st.write("s", 0, b"x" * 10)

    def crash(*_a: object) -> None:
        raise OSError(5, "simulated crash before rename")

    monkeypatch.setattr("tidegate.tier2.fsmeta.os.replace", crash)
    with pytest.raises(StorageError):
        st.seal("s")  # the temporary file was written, never renamed
    monkeypatch.undo()
    fresh = FileSystemStorage(tmp_path, chunk_bytes_max=10)
    assert fresh.get_info("s") == SegmentInfo("s", 10, 0, False)
    fresh.seal("s")
    assert FileSystemStorage(tmp_path).get_info("s").sealed


def _concat_setup(root: Path) -> FileSystemStorage:
    st = FileSystemStorage(root, chunk_bytes_max=4)
    st.create("t")
    st.write("t", 0, b"target")
    st.create("t#txn")
    st.write("t#txn", 0, b"source!!!")
    st.seal("t#txn")
    return st


def test_concat_crash_before_commit_rolls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = _concat_setup(tmp_path)
    real_unlink = os.unlink

    def crash_on_source_meta(path: object, *a: object, **kw: object) -> None:
        if str(path).endswith(os.sep + META) and "txn" in str(path):
            raise OSError(5, "simulated crash at the commit point")
        real_unlink(path)  # type: ignore[arg-type]

    monkeypatch.setattr(fs_module.os, "unlink", crash_on_source_meta)
    with pytest.raises(StorageError):
        st.concat("t", 6, "t#txn")
    monkeypatch.undo()
    assert (tmp_path / encode_name("t") / META_NEXT).exists()
    fresh = FileSystemStorage(tmp_path, chunk_bytes_max=4)
    assert fresh.get_info("t") == SegmentInfo("t", 6, 0, False)
    assert fresh.read("t", 0, 6) == b"target"
    assert fresh.read("t#txn", 0, 9) == b"source!!!"
    assert _chunks(tmp_path, "t") == [0, 4]
    fresh.write("t", 6, b"-more")
    assert fresh.read("t#txn", 0, 9) == b"source!!!"  # its linked chunks were untouched
    fresh.concat("t", 11, "t#txn")
    assert fresh.read("t", 0, 20) == b"target-moresource!!!"


def test_concat_crash_after_commit_rolls_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = _concat_setup(tmp_path)
    real_replace = os.replace

    def crash(src: object, dst: object) -> None:
        if str(src).endswith(META_NEXT):
            raise OSError(5, "simulated crash after the commit point")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(fs_module.os, "replace", crash)
    with pytest.raises(StorageError):
        st.concat("t", 6, "t#txn")
    monkeypatch.undo()
    fresh = FileSystemStorage(tmp_path, chunk_bytes_max=4)
    assert not fresh.exists("t#txn")
    assert fresh.get_info("t") == SegmentInfo("t", 15, 0, False)
    assert fresh.read("t", 0, 15) == b"targetsource!!!"
    assert not (tmp_path / encode_name("t#txn")).exists()
    # Re-creating the source name after the crash must not undo the concat either.
    again = FileSystemStorage(tmp_path, chunk_bytes_max=4)
    st2 = _concat_setup_source_only(again)
    assert st2.get_info("t#txn").length == 0
    assert again.read("t", 0, 15) == b"targetsource!!!"


def _concat_setup_source_only(st: FileSystemStorage) -> FileSystemStorage:
    st.create("t#txn")
    return st


def test_concat_moves_files_without_copying(tmp_path: Path) -> None:
    st = _concat_setup(tmp_path)
    inode = _chunk_path(tmp_path, "t#txn", 4).stat().st_ino
    st.concat("t", 6, "t#txn")
    assert _chunk_path(tmp_path, "t", 10).stat().st_ino == inode
    assert _chunks(tmp_path, "t") == [0, 4, 6, 10, 14]
    st.write("t", 15, b"xyz")
    assert FileSystemStorage(tmp_path).read("t", 0, 18) == b"targetsource!!!xyz"


def test_kill_9_mid_write_leaves_a_prefix(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    root = tmp_path / "t2"
    acked = 0
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tier2.writer_child", str(root)],
            cwd=repo,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        for _ in range(40):
            line = proc.stdout.readline()
            assert line, f"child exited early with {proc.poll()}"
            acked = int(line)
            assert time.monotonic() < deadline
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout.read().splitlines():
            acked = int(line)
        proc.stdout.close()
        st = FileSystemStorage(root, chunk_bytes_max=64 * 1024)
        info = st.get_info(NAME)
        assert info.length >= acked  # everything acknowledged is there
        assert st.read(NAME, 0, info.length) == stream_bytes(info.length)  # and no garbage


def test_write_of_many_buffers_across_chunks_and_iov_max(tmp_path: Path) -> None:
    """A write given as a list of buffers lands back to back, split across chunk files
    wherever the chunk size falls, with more buffers than one ``pwritev`` takes."""
    from tidegate.tier2.filesystem import FileSystemStorage

    s = FileSystemStorage(tmp_path, chunk_bytes_max=10_000)
    s.create("seg")
    parts = [bytes([i % 251]) * (1 + i % 7) for i in range(3000)]  # ~12 KB in 3000 pieces
    expect = b"".join(parts)
    s.write("seg", 0, [memoryview(p) for p in parts[:1500]])
    s.write("seg", len(b"".join(parts[:1500])), parts[1500:])
    assert s.get_info("seg").length == len(expect)
    assert s.read("seg", 0, len(expect)) == expect
    assert len(list(tmp_path.rglob("*.chunk"))) == 2
    s.write("seg", len(expect), [b"", bytearray(b"xy"), memoryview(b"z")])
    assert s.read("seg", len(expect), 3) == b"xyz"


def test_dropped_pages_and_read_ahead_keep_every_byte(tmp_path: Path) -> None:
    """Pages leave the page cache after each append (the segment store's setting) and
    reads ask for read-ahead: appends at unaligned offsets and reads across chunks still
    return exactly what was written, also from a new instance."""
    kw = {"chunk_bytes_max": 10_000, "drop_written_pages": True, "read_ahead_bytes": 8192}
    s = FileSystemStorage(tmp_path, **kw)  # type: ignore[arg-type]
    s.create("seg")
    data = bytearray()
    for i, n in enumerate([1, 4095, 4097, 333, 9000, 12_345, 7]):
        piece = os.urandom(n)
        s.write("seg", len(data), [memoryview(piece[: n // 2]), memoryview(piece[n // 2 :])])
        data += piece
        assert s.read("seg", 0, len(data)) == bytes(data), i
    again = FileSystemStorage(tmp_path, **kw)  # type: ignore[arg-type]
    for start in range(0, len(data), 2999):
        assert again.read("seg", start, min(5000, len(data) - start)) == bytes(data[start : start + 5000])


def test_read_ahead_stops_where_the_caller_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment store's cache holds what follows a miss: Tier-2 is asked to read ahead
    no further than that (``read_ahead_max``), and not at all for 0."""
    asked: list[int] = []
    real = os.posix_fadvise

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_WILLNEED:
            asked.append(length)
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    s = FileSystemStorage(tmp_path, read_ahead_bytes=8192)
    s.create("seg")
    s.write("seg", 0, [os.urandom(20_000)])
    s.read("seg", 0, 100)
    s.read("seg", 0, 100, read_ahead_max=1000)
    s.read("seg", 0, 100, read_ahead_max=0)
    s.read("seg", 0, 100, read_ahead_max=1 << 40)
    assert asked == [8192, 1000, 8192]


def _record_fdatasyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file names ``os.fdatasync`` is called on from now on, in order."""
    synced: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1])
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return synced


def test_unsynced_writes_are_synced_before_a_roll_and_by_the_next_durable_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``durable=False`` skips the ``fdatasync`` and starts the write-back; the bytes
    are readable at once. They are synced (one ``fdatasync`` of the last chunk) by the
    next durable write, an empty durable write, a seal, or before a concat; a chunk is
    synced before the next one is created, so only the last chunk ever holds unsynced
    bytes (a power failure can only cut it back to a prefix)."""
    synced = _record_fdatasyncs(monkeypatch)
    s = FileSystemStorage(tmp_path, chunk_bytes_max=100, drop_written_pages=True)
    s.create("seg")
    first = f"{0:020d}.chunk"
    data = os.urandom(300)
    s.write("seg", 0, [data[:40]], durable=False)
    s.write("seg", 40, [data[40:70]], durable=False)
    assert synced == []
    assert s.read("seg", 0, 70) == data[:70]
    assert s.get_info("seg").length == 70
    s.write("seg", 70, [], durable=True)
    assert synced == [first]
    s.write("seg", 70, [], durable=True)  # nothing pending: no sync
    assert synced == [first]

    # Unsynced bytes in chunk 0, then a write that rolls into chunk 100: chunk 0 is
    # synced before chunk 100 exists; chunk 100's own bytes wait.
    synced.clear()
    s.write("seg", 70, [data[70:90]], durable=False)
    s.write("seg", 90, [data[90:150]], durable=False)
    assert synced == [first]
    synced.clear()
    s.write("seg", 150, [data[150:160]])  # durable: one sync covers 100..160
    assert synced == [f"{100:020d}.chunk"]

    # Seal syncs what is pending; a concat syncs the target's last chunk first.
    s.write("seg", 160, [data[160:200]], durable=False)
    s.create("src")
    s.write("src", 0, [data[200:300]], durable=False)
    synced.clear()
    s.seal("src")
    assert synced == [first]  # src's only chunk
    synced.clear()
    s.concat("seg", 200, "src")
    assert synced == [f"{100:020d}.chunk"]
    again = FileSystemStorage(tmp_path, chunk_bytes_max=100)
    assert again.read("seg", 0, 300) == data


def test_truncating_away_the_unsynced_chunk_forgets_it(tmp_path: Path) -> None:
    s = FileSystemStorage(tmp_path, chunk_bytes_max=100)
    s.create("seg")
    s.write("seg", 0, [b"x" * 50], durable=False)
    s.truncate("seg", 50)  # every chunk goes
    s.write("seg", 50, [], durable=True)  # nothing left to sync: no error
    s.write("seg", 50, [b"y" * 10])
    assert s.read("seg", 50, 10) == b"y" * 10


def test_a_reloaded_segment_syncs_its_last_chunk_on_the_next_durable_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instance killed after unsynced writes leaves them in the page cache, not on
    the disk: whoever loads the segment next treats its last chunk as unsynced, so an
    empty durable write (the storage writer's closing call) syncs it."""
    first = FileSystemStorage(tmp_path, chunk_bytes_max=100)
    first.create("seg")
    first.write("seg", 0, [b"a" * 150], durable=False)  # chunk 0 synced at the roll
    synced = _record_fdatasyncs(monkeypatch)
    second = FileSystemStorage(tmp_path, chunk_bytes_max=100)  # the next process
    assert second.get_info("seg").length == 150
    second.write("seg", 150, [], durable=True)
    assert synced == [f"{100:020d}.chunk"]
    second.write("seg", 150, [], durable=True)
    assert synced == [f"{100:020d}.chunk"]  # once
