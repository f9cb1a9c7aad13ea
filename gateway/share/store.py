"""Durable share group state in one table segment (the share coordinator's state in
Kafka, ``ShareCoordinator``), written through ``gateway.groups.store.GroupStore``'s
single writer so every write lands in call order.

Keys (length-prefixed UTF-8, big-endian):

- ``b"p" + str32 group + str32 topic + i32 partition`` -> a share-partition (JSON:
  ``start`` offset and ``runs`` of [first, last, state, delivery count]; in cluster mode
  also ``epoch``, the leader epoch of the partition leader that wrote it, ``claims.py``);
- ``b"c" + group`` -> the group's configs (JSON object of name -> value).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from tidegate.core.segmentstore.api import TableEntry

_PARTITION = b"p"
_CONFIGS = b"c"
#: The prefix of every group's configs key.
CONFIGS = _CONFIGS

Runs = list[tuple[int, int, int, int]]


def _str32(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">I", len(b)) + b


def partition_key(group_id: str, topic: str, partition: int) -> bytes:
    return _PARTITION + _str32(group_id) + _str32(topic) + struct.pack(">i", partition)


def configs_key(group_id: str) -> bytes:
    return _CONFIGS + group_id.encode()


def encode_partition(start_offset: int, runs: Runs, epoch: int | None = None) -> bytes:
    d: dict[str, Any] = {"start": start_offset, "runs": [list(r) for r in runs]}
    if epoch is not None:
        d["epoch"] = epoch
    return json.dumps(d).encode()


def decode_partition(value: bytes) -> tuple[int, Runs, int]:
    """A stored share-partition: start offset, runs, and the leader epoch that wrote it
    (-1: written by a single node or the share coordinator)."""
    d: dict[str, Any] = json.loads(value)
    runs = [(int(a), int(b), int(c), int(n)) for a, b, c, n in d["runs"]]
    return int(d["start"]), runs, int(d.get("epoch", -1))


def partitions_prefix(group_id: str) -> bytes:
    return _PARTITION + _str32(group_id)


def parse_partition_key(key: bytes) -> tuple[str, str, int]:
    pos = 1
    names = []
    for _ in range(2):
        (n,) = struct.unpack_from(">I", key, pos)
        names.append(key[pos + 4 : pos + 4 + n].decode())
        pos += 4 + n
    (partition,) = struct.unpack_from(">i", key, pos)
    return names[0], names[1], partition


def encode_configs(configs: dict[str, str]) -> bytes:
    return json.dumps(configs).encode()


def decode(entries: list[TableEntry]) -> tuple[dict[tuple[str, str, int], tuple[int, Runs]],
                                               dict[str, dict[str, str]]]:
    """Every stored share-partition and group config, as loaded at start."""
    partitions: dict[tuple[str, str, int], tuple[int, Runs]] = {}
    configs: dict[str, dict[str, str]] = {}
    for e in entries:
        key = bytes(e.key)
        if key.startswith(_CONFIGS):
            configs[key[1:].decode()] = {str(k): str(v) for k, v in json.loads(e.value).items()}
        elif key.startswith(_PARTITION):
            start, runs, _ = decode_partition(bytes(e.value))
            partitions[parse_partition_key(key)] = (start, runs)
    return partitions, configs
