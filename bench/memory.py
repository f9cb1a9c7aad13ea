"""RSS of `tidegate serve` while a few GB flow in and then back out from offset 0
(issue 6 / DESIGN invariant 6): the server runs with a small `cache_bytes_max`, RSS
is sampled from /proc every `sample_ms`, and the peak per phase is printed as JSON.

    .venv/bin/python -m bench.memory --gb 2 --cache-mib 64 [--source DIR]

`--source DIR` runs the server from another checkout (e.g. `git archive` of an older
commit), for before/after figures with the same clients.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.kafka_probe import wait_until_ready
from bench.systems import free_port
from bench.workloads import ClientTuning, create_topic, run_consume, run_produce


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """Peak RSS of one process, sampled every `sample_ms` on a thread."""

    def __init__(self, pid: int, sample_ms: int) -> None:
        self.pid = pid
        self.sample_s = sample_ms / 1000
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except OSError:
                return
            self._stop.wait(self.sample_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--cache-mib", type=int, default=64)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--sample-ms", type=int, default=100)
    ap.add_argument("--source", type=Path, default=None)
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    args = ap.parse_args()
    records = int(args.gb * 1e9) // args.record_bytes
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        config = work / "tidegate.toml"
        config.write_text(f"[store]\ncache_bytes_max = {args.cache_mib * 1024 * 1024}\n")
        port = free_port()
        argv = [
            sys.executable, "-m", "tidegate.gateway.cli", "serve",
            "--data-dir", str(work / "data"),
            "--listen", f"127.0.0.1:{port}",
            "--rest", "off", "--grpc", "off",
            "--config", str(config),
        ]  # fmt: skip
        cwd = args.source if args.source is not None else Path(__file__).resolve().parent.parent
        log = open(work / "server.log", "wb")
        proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_ready("127.0.0.1", port, time.monotonic() + 60.0, lambda: proc.poll() is None)
            bootstrap = f"127.0.0.1:{port}"
            tuning = ClientTuning()
            create_topic(bootstrap, "mem", args.partitions, 30.0)
            idle = rss_bytes(proc.pid)
            with RssSampler(proc.pid, args.sample_ms) as prod:
                p = run_produce(
                    bootstrap, tuning, "mem", args.record_bytes, records, args.producers,
                    proc.pid, args.timeout_s,
                )  # fmt: skip
            after_produce = rss_bytes(proc.pid)
            with RssSampler(proc.pid, args.sample_ms) as cons:
                c = run_consume(
                    bootstrap, tuning, "mem", args.partitions, records, proc.pid, args.timeout_s
                )
            out = {
                "source": str(cwd),
                "gb": args.gb,
                "cache_mib": args.cache_mib,
                "rss_idle_mib": idle >> 20,
                "rss_peak_produce_mib": prod.peak >> 20,
                "rss_after_produce_mib": after_produce >> 20,
                "rss_peak_consume_mib": cons.peak >> 20,
                "rss_end_mib": rss_bytes(proc.pid) >> 20,
                "produce_mb_s": round(p.mb_per_s, 1),
                "consume_mb_s": round(c.mb_per_s, 1),
                "loadavg": os.getloadavg(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            print(json.dumps(out))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


if __name__ == "__main__":
    main()
