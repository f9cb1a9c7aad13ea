"""Produce throughput through a PLAINTEXT, an SSL and a SASL_SSL (SCRAM-SHA-512)
listener of one ``tidegate serve``, in the same run, rounds alternating the listeners
(the machine is shared and noisy); medians are quoted. ``bench.run`` runs it after its
workloads (``--security-mb``, 0 skips it); alone:

    python -m bench.security --mb 64 --rounds 3

Last line: ``RESULT {json}`` with MB/s per listener and the ratios to PLAINTEXT.
Issue 37's goal: SSL at 1 KB ≥ 0.8 × PLAINTEXT (printed beside the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import systems, workloads

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
#: Issue 37: produce through TLS at 1 KB at least this share of PLAINTEXT.
SSL_GOAL_RATIO = 0.8
USER, PASSWORD = "bench", "bench-secret"


def _certs(tmp: Path) -> Path:
    import trustme

    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    return tmp / "ca.pem"


def _client_conf(protocol: str, port: int, ca: Path) -> dict[str, Any]:
    conf = workloads.ClientTuning().producer(f"127.0.0.1:{port}")
    conf["security.protocol"] = protocol
    if protocol != "PLAINTEXT":
        conf["ssl.ca.location"] = str(ca)
    if protocol == "SASL_SSL":
        conf.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER,
                     "sasl.password": PASSWORD})
    return conf


def _produce(conf: dict[str, Any], topic: str, records: int, record_bytes: int) -> float:
    """MB/s of ``records`` acks=all records from one producer, first send to last ack."""
    from confluent_kafka import Producer

    failures: list[Any] = []
    producer = Producer({**conf, "delivery.report.only.error": True,
                         "on_delivery": lambda err, _msg: failures.append(err)})
    producer.list_topics(topic, timeout=30)  # connected and logged in before the clock
    value = os.urandom(record_bytes)
    start = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
        if i & 0x3FFF == 0:
            producer.poll(0)
    left = producer.flush(120)
    wall_s = time.monotonic() - start
    if failures or left:
        raise RuntimeError(f"{topic}: {len(failures)} failed, {left} undelivered: {failures[:1]}")
    return records * record_bytes / wall_s / 1e6


def run(mb: float, rounds: int, record_bytes: int, work_dir: Path) -> dict[str, Any]:
    ca = _certs(work_dir)
    config = work_dir / "tidegate.toml"
    server = systems.tidegate_server(work_dir / "data", work_dir, config)
    # The PLAINTEXT listener is where the harness waits for the server to be ready.
    ports = {"PLAINTEXT": server.port, "SSL": systems.free_port(), "SASL_SSL": systems.free_port()}
    config.write_text(
        "listeners = \"" + ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items())
        + f"\"\n\"ssl.keystore.location\" = \"{work_dir / 'server.pem'}\"\n"
        + "\"auto.create.topics.enable\" = true\n"
        + f"[sasl.users]\n{USER} = \"{PASSWORD}\"\n"
    )
    server.start(60)
    records = max(1, int(mb * 1024 * 1024 / record_bytes))
    measured: dict[str, list[float]] = {p: [] for p in PROTOCOLS}
    try:
        for r in range(rounds):
            order = PROTOCOLS if r % 2 == 0 else tuple(reversed(PROTOCOLS))
            for protocol in order:
                conf = _client_conf(protocol, ports[protocol], ca)
                measured[protocol].append(
                    _produce(conf, f"sec-{protocol.lower()}-{r}", records, record_bytes)
                )
    finally:
        server.stop()
    medians = {p: statistics.median(v) for p, v in measured.items()}
    return {
        "record_bytes": record_bytes, "mb_per_case": mb, "rounds": rounds,
        "mb_per_s": measured, "median_mb_per_s": medians,
        "ratio_to_plaintext": {p: medians[p] / medians["PLAINTEXT"] for p in PROTOCOLS},
    }


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"### Produce by listener ({doc['record_bytes']} B records, acks=all, "
        f"{doc['mb_per_case']:g} MiB per case, median of {doc['rounds']})",
        "", "| listener | MB/s | vs PLAINTEXT |", "| --- | ---: | ---: |",
    ]
    for p in PROTOCOLS:
        lines.append(f"| {p} | {doc['median_mb_per_s'][p]:.1f} | "
                     f"{doc['ratio_to_plaintext'][p]:.2f} |")
    ssl_ratio = doc["ratio_to_plaintext"]["SSL"]
    lines.append(f"\nGoal (issue 37): SSL ≥ {SSL_GOAL_RATIO:g} × PLAINTEXT: {ssl_ratio:.2f}, "
                 f"{'met' if ssl_ratio >= SSL_GOAL_RATIO else 'not met'}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.security", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=64.0, help="MiB produced per listener and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--record-bytes", type=int, default=1024)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tidegate-bench-security-") as tmp:
        doc = run(args.mb, args.rounds, args.record_bytes, Path(tmp))
    print(markdown(doc))
    print("RESULT " + json.dumps(doc, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
