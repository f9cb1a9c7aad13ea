"""Metadata for every topic on a cluster of three: how long one all-topics request takes
on each node (in cluster mode each topic's leaders take a metadata read, maybe on another
node).

    python -m bench.cluster_metadata [--topics N] [--requests R]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import MetadataRequest

from bench.cluster import _stop, _zookeeper, three_nodes

QUIET = {"log_level": 3}


def _metadata_ms(address: str, requests: int) -> list[float]:
    host, port = address.rsplit(":", 1)
    out = []
    with socket.create_connection((host, int(port))) as sock:
        for i in range(requests):
            req = MetadataRequest[1](topics=None)
            req.with_header(correlation_id=i + 1, client_id="bench")
            data = bytes(req.encode(version=1, header=True, framed=True))
            started = time.perf_counter()
            sock.sendall(data)
            (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
            got = 0
            while got < size:
                got += len(sock.recv(size - got))
            out.append((time.perf_counter() - started) * 1000)
    return out


def run(topics: int, requests: int) -> dict[str, Any]:
    out: dict[str, Any] = {"topics": topics, "requests": requests}
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-metadata-") as tmp:
        root = Path(tmp)
        zk, hosts = _zookeeper(root)
        nodes: list[subprocess.Popen[bytes]] = []
        try:
            addresses = three_nodes(root, hosts, nodes)
            admin = AdminClient({"bootstrap.servers": ",".join(addresses), **QUIET})
            made = admin.create_topics([NewTopic(f"md-{i}", 2, 1) for i in range(topics)])
            for f in made.values():
                f.result(120)
            time.sleep(2)  # every node learns the topics
            for n, address in enumerate(addresses, 1):
                times = sorted(_metadata_ms(address, requests))
                out[f"node_{n}"] = {
                    "median_ms": round(statistics.median(times), 1),
                    "p90_ms": round(times[int(len(times) * 0.9) - 1], 1),
                }
        finally:
            _stop(nodes)
            _stop([zk])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.topics, args.requests), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
