"""One node against three: the same produce and consume, once against an embedded
``tidegate serve`` and once against a cluster of three (ZooKeeper from Debian, Tier-1 and
Tier-2 in directories the nodes share), all on this machine.

On a machine of few cores the point is that the cluster works under load and how its
cost grows (every call to a container of another node crosses loopback, and three
processes share the cores), not a speed-up.

    python -m bench.cluster [--records N] [--record-bytes B] [--partitions P]
    make bench BENCH_ARGS=--cluster     (the same, from bench.run; a plain `make bench`
                                         runs it after the rest, --cluster-records 100000)
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.ports import free_port

ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
QUIET = {"log_level": 3}


def _zookeeper(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    (root / "zk").mkdir()
    cfg = root / "zoo.cfg"
    cfg.write_text(f"tickTime=500\ndataDir={root / 'zk'}\nclientPort={port}\n"
                   "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n")
    log = root / "zookeeper.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["java", "-Xmx128m", "-cp", ZK_CLASSPATH,
                                 "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # ZooKeeper answers its "srvr" four-letter word
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"srvr")
                if b"Mode" in s.recv(4096):
                    return proc, f"127.0.0.1:{port}"
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"ZooKeeper did not start:\n{log.read_text()[-2000:]}")


def _node(root: Path, name: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = root / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.gateway.cli", "serve", "--data-dir", str(root / name),
             "--listen", f"127.0.0.1:{port}", "--rest", "off", "--grpc", f"127.0.0.1:{free_port()}",
             "--log-level", "WARNING", *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # WARNING level: readiness is the Kafka port answering
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited:\n{log.read_text()[-2000:]}") from None
            time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


def _measure(bootstrap: str, records: int, record_bytes: int, partitions: int) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic("bench", partitions, 1)])["bench"].result(60)
    time.sleep(1)  # every node learns the topic
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 1_000_000, **QUIET})
    payload = b"x" * record_bytes
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce("bench", payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    produce_s = time.monotonic() - started
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "fetch.queue.backoff.ms": 10, **QUIET})
    consumer.assign([TopicPartition("bench", p, 0) for p in range(partitions)])
    got = 0
    started = time.monotonic()
    while got < records and time.monotonic() - started < 300:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                got += 1
    consume_s = time.monotonic() - started
    consumer.close()
    mb = records * record_bytes / 1e6
    return {"produce_mb_s": round(mb / produce_s, 1), "consume_mb_s": round(mb / consume_s, 1),
            "consumed": got}


def three_nodes(root: Path, hosts: str, procs: list[subprocess.Popen[bytes]]) -> list[str]:
    """Three cluster nodes on ZooKeeper ``hosts`` (appended to ``procs`` as they start, for
    the caller to stop), once the container map has settled over them: their addresses."""
    addresses = []
    for n in (1, 2, 3):
        proc, address = _node(root, f"node-{n}", [
            "--zookeeper", hosts, "--node-id", str(n), "--container-count", "6",
            "--tier1-dir", str(root / "shared-tier1"), "--tier2-dir", str(root / "shared-tier2"),
        ])
        procs.append(proc)
        addresses.append(address)
    time.sleep(2)  # the map settles over the three
    return addresses


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(records: int, record_bytes: int, partitions: int) -> dict[str, Any]:
    out: dict[str, Any] = {"records": records, "record_bytes": record_bytes, "partitions": partitions}
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-cluster-") as tmp:
        root = Path(tmp)
        one, bootstrap = _node(root, "single", [])
        try:
            out["one_node"] = _measure(bootstrap, records, record_bytes, partitions)
        finally:
            _stop([one])
        zk, hosts = _zookeeper(root)
        nodes: list[subprocess.Popen[bytes]] = []
        try:
            addresses = three_nodes(root, hosts, nodes)
            out["three_nodes"] = _measure(",".join(addresses), records, record_bytes, partitions)
        finally:
            _stop(nodes)
            _stop([zk])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=6)
    args = p.parse_args(argv)
    result = run(args.records, args.record_bytes, args.partitions)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
