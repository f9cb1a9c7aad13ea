"""The Tier-2 ``Storage`` contract, run against every implementation."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tidegate.tier2.api import (
    BadOffsetError,
    SegmentExistsError,
    SegmentInfo,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
    Storage,
)
from tidegate.tier2.filesystem import FileSystemStorage
from tidegate.tier2.inmemory import InMemoryStorage

Factory = Callable[[Path], Storage]

FACTORIES: dict[str, Factory] = {
    "inmemory": lambda _root: InMemoryStorage(),
    # Small chunks so every test crosses chunk boundaries.
    "filesystem": lambda root: FileSystemStorage(root, chunk_bytes_max=7),
    "filesystem-nocache": lambda root: FileSystemStorage(
        root, chunk_bytes_max=5, meta_cache_entries_max=0
    ),
    # As the segment store runs it: written pages dropped, reads ask for read-ahead.
    "filesystem-dropping": lambda root: FileSystemStorage(
        root, chunk_bytes_max=7, drop_written_pages=True, read_ahead_bytes=64
    ),
}


@pytest.fixture(params=sorted(FACTORIES))
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    yield FACTORIES[request.param](tmp_path / "t2")


NAMES = ["scope/stream/0.#epoch.0", "a", "kafka/t/12.#transaction.deadbeef", "x/../y", "%2F"]


def test_create_and_info(storage: Storage) -> None:
    for name in NAMES:
        assert not storage.exists(name)
        assert storage.create(name) == SegmentInfo(name, 0, 0, False)
        assert storage.exists(name)
        assert storage.get_info(name) == SegmentInfo(name, 0, 0, False)
    assert list(storage.list_segments()) == sorted(NAMES)
    with pytest.raises(SegmentExistsError):
        storage.create(NAMES[0])


def test_missing_segment(storage: Storage) -> None:
    with pytest.raises(SegmentNotFoundError):
        storage.get_info("nope")
    with pytest.raises(SegmentNotFoundError):
        storage.write("nope", 0, b"x")
    with pytest.raises(SegmentNotFoundError):
        storage.read("nope", 0, 0)
    with pytest.raises(SegmentNotFoundError):
        storage.seal("nope")
    with pytest.raises(SegmentNotFoundError):
        storage.truncate("nope", 0)
    with pytest.raises(SegmentNotFoundError):
        storage.delete("nope")


def test_write_read_across_chunks(storage: Storage) -> None:
    storage.create("s")
    expected = bytearray()
    for i in range(20):
        piece = bytes([i]) * (i % 5 + 1)
        storage.write("s", len(expected), piece)
        expected += piece
    storage.write("s", len(expected), memoryview(b"tail-bytes-here")[2:])
    expected += b"il-bytes-here"
    assert storage.get_info("s").length == len(expected)
    assert storage.read("s", 0, len(expected)) == bytes(expected)
    for off in range(0, len(expected), 3):
        for n in (0, 1, 9, 20):
            if off + n <= len(expected):
                assert storage.read("s", off, n) == bytes(expected[off : off + n])


def test_write_at_wrong_offset(storage: Storage) -> None:
    storage.create("s")
    storage.write("s", 0, b"abc")
    for off in (0, 2, 4):
        with pytest.raises(BadOffsetError):
            storage.write("s", off, b"zz")
    assert storage.read("s", 0, 3) == b"abc"
    assert storage.get_info("s").length == 3


def test_read_out_of_range(storage: Storage) -> None:
    storage.create("s")
    storage.write("s", 0, b"0123456789")
    with pytest.raises(BadOffsetError):
        storage.read("s", 5, 6)
    with pytest.raises(BadOffsetError):
        storage.read("s", 11, 0)
    with pytest.raises(BadOffsetError):
        storage.read("s", -1, 1)
    assert storage.read("s", 10, 0) == b""


def test_seal(storage: Storage) -> None:
    storage.create("s")
    storage.write("s", 0, b"abc")
    storage.seal("s")
    storage.seal("s")
    assert storage.get_info("s") == SegmentInfo("s", 3, 0, True)
    with pytest.raises(SegmentSealedError):
        storage.write("s", 3, b"d")
    assert storage.read("s", 0, 3) == b"abc"


def test_truncate_keeps_offsets(storage: Storage) -> None:
    storage.create("s")
    data = bytes(range(50))
    storage.write("s", 0, data[:23])
    storage.write("s", 23, data[23:])
    storage.truncate("s", 16)
    assert storage.get_info("s") == SegmentInfo("s", 50, 16, False)
    assert storage.read("s", 16, 34) == data[16:]
    assert storage.read("s", 30, 5) == data[30:35]
    with pytest.raises(BadOffsetError):
        storage.read("s", 15, 2)
    storage.truncate("s", 10)  # below the start: already satisfied
    assert storage.get_info("s").start_offset == 16
    with pytest.raises(BadOffsetError):
        storage.truncate("s", 51)
    storage.write("s", 50, b"more")
    assert storage.read("s", 48, 6) == data[48:] + b"more"
    storage.truncate("s", 54)
    assert storage.get_info("s") == SegmentInfo("s", 54, 54, False)
    assert storage.read("s", 54, 0) == b""
    storage.write("s", 54, b"again")
    assert storage.read("s", 54, 5) == b"again"


def test_truncate_sealed(storage: Storage) -> None:
    storage.create("s")
    storage.write("s", 0, b"0123456789")
    storage.seal("s")
    storage.truncate("s", 4)
    assert storage.get_info("s") == SegmentInfo("s", 10, 4, True)
    assert storage.read("s", 4, 6) == b"456789"


def test_concat(storage: Storage) -> None:
    storage.create("t")
    storage.write("t", 0, b"target-")
    storage.write("t", 7, b"x")
    storage.create("t#txn")
    storage.write("t#txn", 0, b"source-bytes")
    storage.write("t#txn", 12, b"!")
    with pytest.raises(SegmentNotSealedError):
        storage.concat("t", 8, "t#txn")
    storage.seal("t#txn")
    with pytest.raises(BadOffsetError):
        storage.concat("t", 7, "t#txn")
    assert storage.exists("t#txn")
    storage.concat("t", 8, "t#txn")
    assert not storage.exists("t#txn")
    assert storage.get_info("t") == SegmentInfo("t", 21, 0, False)
    assert storage.read("t", 0, 21) == b"target-xsource-bytes!"
    assert storage.read("t", 8, 6) == b"source"
    storage.write("t", 21, b"after")
    assert storage.read("t", 19, 7) == b"s!after"
    assert list(storage.list_segments()) == ["t"]


def test_concat_into_truncated_target(storage: Storage) -> None:
    storage.create("t")
    storage.write("t", 0, b"0123456789")
    storage.truncate("t", 9)
    storage.create("src")
    storage.write("src", 0, b"abc")
    storage.seal("src")
    storage.concat("t", 10, "src")
    assert storage.get_info("t") == SegmentInfo("t", 13, 9, False)
    assert storage.read("t", 9, 4) == b"9abc"


def test_concat_empty_source(storage: Storage) -> None:
    storage.create("t")
    storage.write("t", 0, b"ab")
    storage.create("src")
    storage.seal("src")
    storage.concat("t", 2, "src")
    assert storage.get_info("t").length == 2
    assert not storage.exists("src")


def test_concat_errors(storage: Storage) -> None:
    storage.create("t")
    storage.create("src")
    storage.write("src", 0, b"abc")
    storage.seal("src")
    with pytest.raises(SegmentNotFoundError):
        storage.concat("t", 0, "nope")
    with pytest.raises(SegmentNotFoundError):
        storage.concat("nope", 0, "src")
    storage.seal("t")
    with pytest.raises(SegmentSealedError):
        storage.concat("t", 0, "src")
    storage.create("u")
    storage.create("trunc")
    storage.write("trunc", 0, b"abc")
    storage.truncate("trunc", 1)
    storage.seal("trunc")
    with pytest.raises(BadOffsetError):
        storage.concat("u", 0, "trunc")
    with pytest.raises(BadOffsetError):
        storage.concat("src", 3, "src")


def test_delete(storage: Storage) -> None:
    storage.create("s")
    storage.write("s", 0, b"abcdefghijklmnop")
    storage.delete("s")
    assert not storage.exists("s")
    assert list(storage.list_segments()) == []
    storage.create("s")
    assert storage.get_info("s") == SegmentInfo("s", 0, 0, False)


def test_concurrent_segments(storage: Storage) -> None:
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            name = f"seg/{i}"
            storage.create(name)
            for j in range(30):
                storage.write(name, j * 3, bytes([i, j, 7]))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i in range(4):
        assert storage.read(f"seg/{i}", 0, 90) == b"".join(bytes([i, j, 7]) for j in range(30))
