"""One node against three: the same produce and consume, once against an embedded
``tidegate serve`` and once against a cluster of three as docs/cluster.md sets one up:
ZooKeeper from Debian, the replicated Tier-1 (each node's plog server, every entry on
all three before the answer) and a shared Tier-2 directory, all on this machine.

Issue 37's goal: the three nodes produce at least half of what one node does (on one
disk the replicated Tier-1 writes every byte three times). Beside throughput it reports,
for the produce phase, the delivery latency the producer saw (p50, p99), each server
process's CPU seconds and bytes written to storage per GB produced (and the producer's
own CPU: it shares the cores), how many partitions each node leads, the model's inputs
(docs/cluster.md, "Throughput at N hosts"). ``--plog-processes`` runs the three plog
servers as processes of their own (``tidegate plog-server``), so their CPU is told apart
from the nodes'.

    python -m bench.cluster [--records N] [--record-bytes B] [--partitions P] [--plog-processes]
    make bench BENCH_ARGS=--cluster     (the same, from bench.run; a plain `make bench`
                                         runs it after the rest, --cluster-records 100000)
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.ports import free_port
from bench.procstat import cpu_seconds

ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
QUIET = {"log_level": 3}
#: Issue 37, goal 5: three nodes' produce throughput over one embedded node's.
GOAL_RATIO = 0.5
READY_S = 90


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


def _wait_log(proc: subprocess.Popen[bytes], log: Path, line: bytes) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if line in log.read_bytes():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name}: exited:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"{log.name}: no {line.decode()!r} in {READY_S}s:\n{log.read_text()[-2000:]}")


def _node(root: Path, name: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """A ``tidegate serve`` (INFO lines: nothing is logged per request) once it is ready."""
    port = free_port()
    log = root / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.gateway.cli", "serve", "--data-dir", str(root / name),
             "--listen", f"127.0.0.1:{port}", "--rest", "off", "--grpc", f"127.0.0.1:{free_port()}",
             *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )
    if "--zookeeper" in extra:
        return proc, f"127.0.0.1:{port}"  # the caller waits: nodes join one after another
    _wait_log(proc, log, b"tidegate ready")
    return proc, f"127.0.0.1:{port}"


def _plog_server(root: Path, name: str, hosts: str) -> subprocess.Popen[bytes]:
    log = root / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.gateway.cli", "plog-server", "--data-dir", str(root / name),
             "--listen", f"127.0.0.1:{free_port()}", "--zookeeper", hosts],
            stdout=out, stderr=subprocess.STDOUT,
        )
    _wait_log(proc, log, b"plog server ready")
    return proc


def _written_bytes(pid: int) -> int:
    """Bytes the process caused to be written to storage (``/proc/PID/io``)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def _wait_replicas(admin: AdminClient, partitions: int, replicas: int) -> None:
    """Until Metadata names ``replicas`` replicas for every partition: in a cluster, the
    plog servers holding its container's active plog. Containers that started while
    fewer plog servers were up write to a short group until their log rolls to a full
    one (``tier1_plog_repair_interval_ms``); measured before, the bench would time two
    copies, not three."""
    deadline = time.monotonic() + READY_S
    while True:
        topic = admin.list_topics("bench", timeout=10).topics["bench"]
        counts = [len(p.replicas) for p in topic.partitions.values()]
        if topic.error is None and len(counts) == partitions and min(counts) >= replicas:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"replicas per partition {counts}, {replicas} awaited")
        time.sleep(0.5)


def _measure(bootstrap: str, records: int, record_bytes: int, partitions: int,
             procs: dict[str, subprocess.Popen[bytes]], replicas: int) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic("bench", partitions, 1)])["bench"].result(60)
    time.sleep(1)  # every node learns the topic
    _wait_replicas(admin, partitions, replicas)
    leader_of = {p.id: p.leader for p in admin.list_topics("bench", timeout=10).topics["bench"].partitions.values()}
    led = Counter(leader_of.values())
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 1_000_000, **QUIET})
    latencies: list[float] = []
    by_node: dict[int, list[float]] = {node: [] for node in led}
    failed: list[str] = []

    def delivered(err: Any, msg: Message) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            latencies.append(msg.latency() or 0.0)
            by_node[leader_of[msg.partition()]].append(latencies[-1])

    # Warm-up: leaders known, connections and producer id made, before the clock starts.
    for p in range(partitions):
        producer.produce("bench", b"w", partition=p, on_delivery=lambda err, msg: None)
    assert producer.flush(60) == 0
    payload = b"x" * record_bytes
    client0 = time.process_time()  # the producer shares the machine's cores
    cpu0 = {name: cpu_seconds(proc.pid) for name, proc in procs.items()}
    written0 = {name: _written_bytes(proc.pid) for name, proc in procs.items()}
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce("bench", payload, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    produce_s = time.monotonic() - started
    assert not failed, failed[:5]
    gb = records * record_bytes / 1e9
    cpu = {name: round((cpu_seconds(proc.pid) - cpu0[name]) / gb, 2) for name, proc in procs.items()}
    client = round((time.process_time() - client0) / gb, 2)
    written = {name: round((_written_bytes(proc.pid) - written0[name]) / (gb * 1e9), 2)
               for name, proc in procs.items()}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "fetch.queue.backoff.ms": 10, **QUIET})
    consumer.assign([TopicPartition("bench", p, 1) for p in range(partitions)])
    got = 0
    started = time.monotonic()
    while got < records and time.monotonic() - started < 300:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                got += 1
    consume_s = time.monotonic() - started
    consumer.close()
    mb = records * record_bytes / 1e6
    latencies.sort()
    return {
        "produce_mb_s": round(mb / produce_s, 1), "consume_mb_s": round(mb / consume_s, 1),
        "consumed": got,
        "partitions_led": {str(node): led[node] for node in sorted(led)},  # by node id
        # The slowest leader sets the pace: one producer fills its queue with that node's records.
        "p50_ms_by_leader": {str(node): round(statistics.median(by_node[node]) * 1000, 1)
                             for node in sorted(by_node) if by_node[node]},
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1),
        "cpu_s_per_gb": cpu, "cpu_s_per_gb_total": round(sum(cpu.values()), 2),
        "client_cpu_s_per_gb": client,
        "written_bytes_per_byte": written,
        "written_bytes_per_byte_total": round(sum(written.values()), 2),
    }


def three_nodes(root: Path, hosts: str, procs: list[subprocess.Popen[bytes]],
                extra: tuple[str, ...] = ()) -> list[str]:
    """Three cluster nodes on ZooKeeper ``hosts`` with the replicated Tier-1 (appended to
    ``procs`` as they start, for the caller to stop), each started once the one before
    joined (a lone node's containers wait for a second plog server), returned once all
    are ready and run containers: their addresses."""
    addresses = []
    for n in (1, 2, 3):
        proc, address = _node(root, f"node-{n}", [
            "--zookeeper", hosts, "--node-id", str(n), "--container-count", "6",
            "--tier2-dir", str(root / "shared-tier2"), *extra,
        ])
        procs.append(proc)
        addresses.append(address)
        _wait_log(proc, root / f"node-{n}.log", b"cluster: node %d joined" % n)
    for n, proc in enumerate(procs[-3:], 1):
        _wait_log(proc, root / f"node-{n}.log", b"tidegate ready")
    # A node takes its share of containers only once it has read the others' segments:
    # a topic created before that is spread over the nodes owning containers then.
    for n, proc in enumerate(procs[-3:], 1):
        _wait_log(proc, root / f"node-{n}.log", b" started here")  # "container N started here"
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
            proc.wait(10)


def run(records: int, record_bytes: int, partitions: int, plog_processes: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"records": records, "record_bytes": record_bytes, "partitions": partitions,
                           "tier1": "replicated, 3 plog servers" + (" (processes)" if plog_processes else "")}
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-cluster-") as tmp:
        root = Path(tmp)
        one, bootstrap = _node(root, "single", [])
        try:
            out["one_node"] = _measure(bootstrap, records, record_bytes, partitions, {"node": one}, 1)
        finally:
            _stop([one])
        zk, hosts = _zookeeper(root)
        nodes: list[subprocess.Popen[bytes]] = []
        plogs: list[subprocess.Popen[bytes]] = []
        try:
            extra: tuple[str, ...] = ()
            if plog_processes:
                plogs.extend(_plog_server(root, f"plog-{n}", hosts) for n in (1, 2, 3))
                extra = ("--set", "store.tier1_plog_server_listen=off")
            addresses = three_nodes(root, hosts, nodes, extra)
            procs = {f"node-{n}": p for n, p in enumerate(nodes, 1)}
            procs.update({f"plog-{n}": p for n, p in enumerate(plogs, 1)})
            procs["zookeeper"] = zk
            # Plog servers of no node are not named as replicas; all three were up
            # before any container started, so every group is whole from the start.
            replicas = 1 if plog_processes else 3
            out["three_nodes"] = _measure(",".join(addresses), records, record_bytes, partitions, procs, replicas)
        finally:
            _stop(nodes)
            _stop(plogs)
            _stop([zk])
    ratio = out["three_nodes"]["produce_mb_s"] / out["one_node"]["produce_mb_s"]
    out["ratio"] = round(ratio, 2)
    out["goal"] = f">= {GOAL_RATIO}"
    out["goal_met"] = ratio >= GOAL_RATIO
    return out


def summary(result: dict[str, Any]) -> str:
    """One line for ``make bench``: the ratio beside its goal."""
    one, three = result["one_node"], result["three_nodes"]
    return (f"cluster produce, 3 nodes / 1 node: {result['ratio']}x (goal {result['goal']}, "
            f"{'met' if result['goal_met'] else 'NOT met'}); {three['produce_mb_s']} vs "
            f"{one['produce_mb_s']} MB/s, p50 {three['p50_ms']} vs {one['p50_ms']} ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--plog-processes", action="store_true",
                   help="run the plog servers as processes of their own")
    args = p.parse_args(argv)
    result = run(args.records, args.record_bytes, args.partitions, args.plog_processes)
    print(json.dumps(result))
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
