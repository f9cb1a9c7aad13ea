"""Where a transactional producer's time and the server's CPU go, beside plain produce.

One ``tidegate serve`` per round; into a fresh topic each, one confluent-kafka producer
writes ``--transactions`` × ``--records-per-txn`` records of ``--record-bytes`` spread
over ``--partitions``, three ways, alternated in every round:

- ``plain``: acks=all, idempotence off (as ``make bench``'s plain produce);
- ``idempotent``: the same with ``enable.idempotence`` (what a transactional producer
  is underneath: at most 5 requests in flight per connection), no transaction;
- ``txn``: a transaction committed every ``--records-per-txn`` records.

For each: MB/s, the time per ``--records-per-txn`` records and how much of it the
application spent in ``commit_transaction``, the server's CPU seconds per GB split
into its event-loop thread and every other thread (``/proc/<pid>/task``), and from its
``/metrics`` the requests of each API per ``--records-per-txn`` records with their mean
server time. The idempotent row apart from the plain one is the client's request shape;
the transactional row apart from the idempotent one is what transactions add.

``python -m bench.txn_breakdown [--rounds N] ...``; last line ``RESULT {json}``.
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

from bench.server_metrics import Samples, scrape
from bench.systems import tidegate_server
from bench.workloads import ClientTuning, create_topic

MODES = ("plain", "idempotent", "txn")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each live thread of ``pid``."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        fields = stat.rsplit(")", 1)[1].split()
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    return out


def request_counts(before: Samples | None, after: Samples | None) -> dict[str, tuple[float, float]]:
    """api -> (requests, server seconds) observed between the two scrapes."""
    out: dict[str, tuple[float, float]] = {}
    if before is None or after is None:
        return out
    for (name, labels), value in after.items():
        if name not in ("tidegate_request_seconds_count", "tidegate_request_seconds_sum"):
            continue
        api = dict(labels).get("api", "?")
        grown = value - before.get((name, labels), 0.0)
        count, seconds = out.get(api, (0.0, 0.0))
        if name.endswith("_count"):
            count += grown
        else:
            seconds += grown
        out[api] = (count, seconds)
    return {api: v for api, v in out.items() if v[0] > 0}


def produce(
    bootstrap: str, metrics_url: str, pid: int, mode: str, topic: str, args: argparse.Namespace
) -> dict[str, Any]:
    from confluent_kafka import Producer

    conf = ClientTuning().producer(bootstrap)
    if mode != "plain":
        conf["enable.idempotence"] = True
    if mode == "txn":
        conf["transactional.id"] = f"breakdown-{topic}"
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    conf.update({"delivery.report.only.error": True, "on_delivery": on_delivery})
    producer = Producer(conf)
    producer.list_topics(topic, timeout=args.timeout_s)
    if mode == "txn":
        producer.init_transactions(args.timeout_s)
    value = os.urandom(args.record_bytes)
    per, partitions = args.records_per_txn, args.partitions
    m0, cpu0, t0 = scrape(metrics_url), thread_cpu_s(pid), time.monotonic()
    commit_s = 0.0
    for _ in range(args.transactions):
        if mode == "txn":
            producer.begin_transaction()
        for i in range(per):
            while True:
                try:
                    producer.produce(topic, value, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i & 0x3F == 0:
                producer.poll(0)
        if mode == "txn":
            began = time.monotonic()
            producer.commit_transaction(args.timeout_s)
            commit_s += time.monotonic() - began
    left = producer.flush(args.timeout_s)
    elapsed = time.monotonic() - t0
    cpu1, m1 = thread_cpu_s(pid), scrape(metrics_url)
    if left or failures:
        raise RuntimeError(f"{mode}: {left} records undelivered, failures {failures[:3]}")
    gb = args.transactions * per * args.record_bytes / 1e9
    loop_s = cpu1.get(pid, 0.0) - cpu0.get(pid, 0.0)
    other_s = sum(v - cpu0.get(t, 0.0) for t, v in cpu1.items() if t != pid)
    n = args.transactions
    return {
        "mode": mode,
        "mb_s": gb * 1000 / elapsed,
        "ms_per_txn": elapsed * 1000 / n,
        "commit_ms_per_txn": commit_s * 1000 / n,
        "loop_s_per_gb": loop_s / gb,
        "other_threads_s_per_gb": other_s / gb,
        "requests": {
            api: {"per_txn": c / n, "mean_ms": s * 1000 / c}
            for api, (c, s) in sorted(request_counts(m0, m1).items())
        },
        "load_average": os.getloadavg()[0],
    }


def run_round(round_no: int, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    server = tidegate_server(work / f"data-{round_no}", work, None)
    server.start(args.ready_timeout_s)
    try:
        assert server.metrics_url is not None
        out = []
        # Alternate the order so no mode always runs on the warmest server.
        order = MODES if round_no % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            topic = f"{mode}-{round_no}"
            create_topic(server.bootstrap, topic, args.partitions, args.timeout_s)
            out.append(produce(server.bootstrap, server.metrics_url, server.pid, mode, topic, args))
        return out
    finally:
        server.stop()


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("mb_s", "ms_per_txn", "commit_ms_per_txn", "loop_s_per_gb", "other_threads_s_per_gb")
    out: dict[str, Any] = {k: statistics.median(r[k] for r in rows) for k in keys}
    apis = sorted({a for r in rows for a in r["requests"]})
    out["requests"] = {
        a: {
            f: statistics.median(r["requests"][a][f] for r in rows if a in r["requests"])
            for f in ("per_txn", "mean_ms")
        }
        for a in apis
    }
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--transactions", type=int, default=40)
    p.add_argument("--records-per-txn", type=int, default=1000)
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--ready-timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="txn-breakdown-") as tmp:
        for r in range(args.rounds):
            rows += run_round(r, args, Path(tmp))
    medians = {m: median_row([r for r in rows if r["mode"] == m]) for m in MODES}
    print(f"| mode | MB/s | ms per {args.records_per_txn} records | of it in commit_transaction "
          "| server event loop s/GB | other threads s/GB | requests per txn (mean server ms) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for mode, m in medians.items():
        reqs = ", ".join(
            f"{a} {v['per_txn']:.1f} ({v['mean_ms']:.1f})" for a, v in m["requests"].items()
            if v["per_txn"] >= 0.5
        )
        print(f"| {mode} | {m['mb_s']:.1f} | {m['ms_per_txn']:.1f} | {m['commit_ms_per_txn']:.1f} "
              f"| {m['loop_s_per_gb']:.1f} | {m['other_threads_s_per_gb']:.1f} | {reqs} |")
    loads = [r["load_average"] for r in rows]
    print(f"load average {min(loads):.1f}-{max(loads):.1f}")
    print("RESULT " + json.dumps({
        "txn_vs_plain": medians["txn"]["mb_s"] / medians["plain"]["mb_s"],
        "idempotent_vs_plain": medians["idempotent"]["mb_s"] / medians["plain"]["mb_s"],
        "txn_vs_idempotent": medians["txn"]["mb_s"] / medians["idempotent"]["mb_s"],
        "medians": medians, "rounds": rows,
    }))


if __name__ == "__main__":
    main()
