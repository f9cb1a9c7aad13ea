"""`make bench`: tidegate against Tansu (memory engine) and the machine's limits, one run.

Per round, the baselines are measured, then every system in turn (A B A B … across
rounds, the machine being shared and noisy) is started fresh on a free loopback port
and driven through the same workloads with the same clients:

- produce `--large-bytes` and `--small-bytes` records, acks=all, to topics of each of
  `--partitions`, from `--producers` processes, then consume the same data from the start;
- one producer at `--latency-mbps` into one partition with a consumer tailing it.

Output: `bench/results/<UTC time>/results.{md,json}`, `throughput_latency.png`, the
servers' logs, and last on stdout a line `RESULT {json}` with the goal ratios of issue 6.
The exit status is 1 if any phase failed (its error is in the outputs).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import tomllib
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench import cproducer, options, report, server_metrics, systems, workloads
from bench.procstat import peak_rss_bytes
from bench.profile import PySpy, summarize
from bench.workloads import ClientTuning

MIB = 1024 * 1024
#: The CPUs this run's processes may use (the server's and the clients' share them).
MACHINE_CPUS = (
    len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
)


class Bench:
    def __init__(self, args: argparse.Namespace, work_dir: Path, out_dir: Path) -> None:
        self.args = args
        self.work_dir = work_dir
        self.out_dir = out_dir
        self.tuning = ClientTuning(
            linger_ms=args.linger_ms,
            batch_bytes=args.batch_bytes,
            fetch_wait_max_ms=args.fetch_wait_max_ms,
            fetch_queue_backoff_ms=args.fetch_queue_backoff_ms,
        )
        self.measurements: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.versions: dict[str, str] = {}
        sizes = [size for size, amount in ((args.large_bytes, args.large_mb),
                                            (args.small_bytes, args.small_records)) if amount > 0]  # fmt: skip
        self.cases = [(size, parts) for size in sizes for parts in args.partition_list]
        # Issue 37's C producer phase: (record size, records, partitions).
        self.c_cases = [
            (size, records, parts)
            for size, records in ((args.small_bytes, args.c_small_records),
                                  (args.large_bytes, args.c_large_records))
            if records > 0
            for parts in args.c_partition_list
        ]  # fmt: skip
        self.latency_workload = f"latency-{args.large_bytes}B-p1"
        # Set during the extra `--profile` pass: figures then go to `profiled`, not into
        # the medians, and each phase is sampled by py-spy into this directory.
        self.profile_dir: Path | None = None
        self.profiled: list[dict[str, Any]] = []
        self.profiles: dict[str, Any] = {}
        # `--compare`: system name -> (unpacked code of the commit, its version string).
        self.compared: dict[str, tuple[Path, str]] = {}
        for ref in args.compare:
            tree, commit = systems.tidegate_tree(ref, args.cache_dir)
            self.compared[f"{report.TIDEGATE}@{ref}"] = (tree, f"tidegate {commit}")

    def steps_per_system(self) -> int:
        # start, produce + consume (+ transactional produce, by time and by records) per
        # case, latency
        return 1 + len(self.c_cases) + 4 * len(self.cases) + 1

    def compacting(self) -> bool:
        return self.args.compaction_records > 0 and report.TIDEGATE in self.args.system_list

    def steps_total(self) -> int:
        runs: int = self.args.runs
        extra = self.steps_per_system() if self.args.profile else 0
        per_run = 1 + len(self.args.system_list) * self.steps_per_system() + self.compacting()
        return runs * per_run + extra

    def records_for(self, size: int) -> int:
        if size == self.args.large_bytes:
            return max(1, int(self.args.large_mb * MIB / size))
        return int(self.args.small_records)

    def run(self, bar: tqdm) -> None:
        tansu_exe = systems.tansu_binary(self.args.cache_dir)
        if report.PEER in self.args.system_list:
            self.versions[report.PEER] = systems.tansu_version(tansu_exe)
        if report.TIDEGATE in self.args.system_list:
            self.versions[report.TIDEGATE] = systems.tidegate_version()
        self.versions.update({name: version for name, (_, version) in self.compared.items()})
        for run in range(self.args.runs):
            bar.set_postfix_str(f"run {run + 1}: baselines")
            self.baselines(run)
            bar.update()
            for name in self.args.system_list:
                server = self.make_server(name, run, tansu_exe)
                self.one_system(run, server, bar)
            if self.compacting():
                bar.set_postfix_str(f"run {run + 1}: compaction")
                self.compaction(run)
                bar.update()
        if self.args.profile:
            self.profile_dir = self.out_dir / "profiles"
            run = self.args.runs
            self.one_system(run, self.make_server(report.TIDEGATE, run, tansu_exe), bar)
            self.profile_dir = None

    @contextlib.contextmanager
    def profiling(self, server: systems.Server, workload: str) -> Iterator[None]:
        """Sample `server` with py-spy around a phase of the profile pass (else nothing)."""
        if self.profile_dir is None:
            yield
            return
        spy = PySpy(server.pid, self.profile_dir / f"{workload}.txt", self.args.profile_rate_hz)
        try:
            yield
        finally:
            spy.stop()
            self.profiles[workload] = {"raw": str(spy.raw_path), **summarize(spy.raw_path)}

    def make_server(self, name: str, run: int, tansu_exe: Path) -> systems.Server:
        logs = self.out_dir / "logs"
        if name == report.PEER:
            return systems.tansu_memory_server(tansu_exe, logs)
        data = self.work_dir / f"run{run}-{name.replace('@', '-')}-data"
        if name in self.compared:
            code, version = self.compared[name]
            return systems.tidegate_server(
                data, logs, self.tidegate_config, name=name, code=code, version=version
            )
        return systems.tidegate_server(data, logs, self.tidegate_config)

    @functools.cached_property
    def tidegate_config(self) -> Path:
        """The user's TOML, or one written here that sets only the cache bound."""
        if self.args.tidegate_config is not None:
            return Path(self.args.tidegate_config)
        path = self.work_dir / "tidegate.toml"
        path.write_text(f"[store]\ncache_bytes_max = {int(self.args.tidegate_cache_mib * MIB)}\n")
        return path

    def tidegate_cache_bytes(self) -> int:
        """The read cache bound tidegate runs with (its own default if the TOML is silent)."""
        with open(self.tidegate_config, "rb") as f:
            store = tomllib.load(f).get("store", {})
        if "cache_bytes_max" in store:
            return int(store["cache_bytes_max"])
        from tidegate.core.segmentstore.config import SegmentStoreConfig

        return SegmentStoreConfig().cache_bytes_max

    def baselines(self, run: int) -> None:
        try:
            from bench.baselines import disk_fdatasync_bandwidth, loopback_tcp_bandwidth
        except ImportError as e:
            self.fail(run, "baseline", "import", f"bench.baselines unavailable: {e}")
            return
        disk_dir = self.work_dir / f"run{run}-disk-baseline"
        disk_dir.mkdir(parents=True, exist_ok=True)
        try:
            disk = disk_fdatasync_bandwidth(disk_dir, int(self.args.disk_mb * MIB))
            tcp = loopback_tcp_bandwidth(int(self.args.loopback_mb * MIB))
        except Exception as e:  # a failed baseline is reported, the run goes on
            self.fail(run, "baseline", "measure", repr(e))
            return
        finally:
            shutil.rmtree(disk_dir, ignore_errors=True)
        self.record(run, "baseline", "disk-fdatasync-1MiB", mb_per_s=disk / 1e6)
        self.record(run, "baseline", "loopback-tcp", mb_per_s=tcp / 1e6)

    def one_system(self, run: int, server: systems.Server, bar: tqdm) -> None:
        name = server.name
        per_system = self.steps_per_system()
        done = 0

        def step(label: str) -> None:
            nonlocal done
            done += 1
            bar.set_postfix_str(f"run {run + 1}: {name} {label}")
            bar.update()

        bar.set_postfix_str(f"run {run + 1}: starting {name}")
        try:
            server.start(self.args.ready_timeout_s)
        except Exception as e:
            self.fail(run, name, "start", str(e))
            bar.update(per_system)
            return
        step("ready")
        produced_bytes = 0
        try:
            for size, records, parts in self.c_cases:
                c_produce = functools.partial(self.c_produce_case, server, size, parts, records)
                if self.phase(run, server, cproducer.workload(size, parts), c_produce):
                    produced_bytes += records * size
                step(f"C produce {size}B p{parts}")
            for size, parts in self.cases:
                topic = f"bench-{size}b-p{parts}-{uuid.uuid4().hex[:8]}"
                records = self.records_for(size)

                produce = functools.partial(self.produce_case, server, topic, size, parts, records)
                consume = functools.partial(
                    workloads.run_consume,
                    server.bootstrap,
                    self.tuning,
                    topic,
                    parts,
                    records,
                    server.pid,
                    self.args.phase_timeout_s,
                    consumers=self.args.consumers,
                )
                produced = self.phase(run, server, f"produce-{size}B-p{parts}", produce)
                step(f"produce {size}B p{parts}")
                if produced:
                    produced_bytes += records * size
                    self.phase(run, server, f"consume-{size}B-p{parts}", consume)
                step(f"consume {size}B p{parts}")
                txn_ms = self.args.txn_commit_ms
                if txn_ms > 0 and size == self.args.large_bytes and name.startswith(report.TIDEGATE):
                    txn = functools.partial(
                        self.produce_case, server, f"{topic}-txn", size, parts, records, txn_ms
                    )
                    if self.phase(run, server, f"txn-produce-{size}B-p{parts}", txn):
                        produced_bytes += records * size
                step(f"txn produce {size}B p{parts}")
                txn_n = self.args.txn_commit_records
                if txn_n > 0 and size == self.args.large_bytes and name.startswith(report.TIDEGATE):
                    txn = functools.partial(
                        self.produce_case, server, f"{topic}-txnr", size, parts, records, 0, txn_n
                    )
                    if self.phase(run, server, f"txn{txn_n}r-produce-{size}B-p{parts}", txn):
                        produced_bytes += records * size
                step(f"txn produce every {txn_n} records {size}B p{parts}")
            if self.args.latency_seconds > 0:  # 0: the latency phase is not run
                self.latency(run, server)
                produced_bytes += int(
                    self.args.latency_mbps
                    * 1e6
                    * (self.args.latency_seconds + self.args.latency_warmup_seconds)
                )
            step("latency")
            self.record(
                run,
                name,
                "server",
                peak_rss_mb=peak_rss_bytes(server.pid) / 1e6,
                mb_through=produced_bytes / 1e6,
            )
        finally:
            code = server.stop()
            if code not in (0, None, -15):
                self.fail(run, name, "stop", f"exit status {code}: {server.log_tail(10)}")
            shutil.rmtree(self.work_dir / f"run{run}-tidegate-data", ignore_errors=True)
            bar.update(per_system - done)

    def produce_case(
        self, server: systems.Server, topic: str, size: int, partitions: int, records: int,
        txn_commit_ms: int = 0,
        txn_commit_records: int = 0,
    ) -> workloads.PhaseResult:
        workloads.create_topic(server.bootstrap, topic, partitions, self.args.ready_timeout_s)
        return workloads.run_produce(
            server.bootstrap,
            self.tuning,
            topic,
            size,
            records,
            self.args.producers,
            server.pid,
            self.args.phase_timeout_s,
            txn_commit_ms,
            txn_commit_records,
        )

    def c_produce_case(
        self, server: systems.Server, size: int, partitions: int, records: int
    ) -> workloads.PhaseResult:
        exe = cproducer.build(self.args.cache_dir)
        topic = f"bench-c-{size}b-p{partitions}-{uuid.uuid4().hex[:8]}"
        workloads.create_topic(server.bootstrap, topic, partitions, self.args.ready_timeout_s)
        result, _ = cproducer.run(
            exe, server.bootstrap, self.tuning, topic, size, records, server.pid,
            self.args.phase_timeout_s,
        )
        return result

    def compaction(self, run: int) -> None:
        """Cleaning MB/s and produce latency while the cleaner runs, on its own `tidegate
        serve` (cleaner every 500 ms)."""
        from bench import compaction

        try:
            figures = compaction.run(
                self.args.compaction_records, self.args.compaction_keys, self.args.large_bytes,
                self.args.compaction_settle_s, backoff_ms=500,
                work_dir=self.work_dir,
            )
        except Exception as e:
            self.fail(run, report.TIDEGATE, compaction.WORKLOAD, repr(e))
            return
        self.record(run, report.TIDEGATE, compaction.WORKLOAD, **figures)

    def latency(self, run: int, server: systems.Server) -> None:
        topic = f"bench-latency-{uuid.uuid4().hex[:8]}"

        def measure() -> dict[str, float]:
            workloads.create_topic(server.bootstrap, topic, 1, self.args.ready_timeout_s)
            url = server.metrics_url
            before = server_metrics.scrape(url) if url else None
            r = workloads.run_latency(
                server.bootstrap,
                self.tuning,
                topic,
                self.args.large_bytes,
                self.args.latency_mbps * 1e6,
                self.args.latency_seconds,
                self.args.latency_warmup_seconds,
                server.pid,
                self.args.phase_timeout_s,
            )
            after = server_metrics.scrape(url) if url else None
            figures: dict[str, float] = {
                "offered_mb_per_s": r.offered_mb_per_s,
                "achieved_mb_per_s": r.achieved_mb_per_s,
                "server_cpu_s": r.server_cpu_s,
                "client_cpu_s": r.client_cpu_s,
                "server_cores": r.server_cores,
                "machine_busy": r.machine_busy,
                "machine_steal": r.machine_steal,
            }
            figures.update({f"produce_{k}_ms": v for k, v in r.produce_ms.items()})
            figures.update({f"e2e_{k}_ms": v for k, v in r.end_to_end_ms.items()})
            # The server's own share (warm-up included): its Produce requests and the
            # Tier-1 write+sync batches under them, as bucket bounds.
            for key, histogram, labels in (
                ("server_produce_p99_ms", "tidegate_request_seconds", {"api": "Produce"}),
                ("tier1_sync_p99_ms", "tidegate_tier1_write_sync_seconds", None),
            ):
                bound = server_metrics.quantile_s(before, after, histogram, 0.99, labels)
                if bound is not None:
                    figures[key] = bound * 1000
            return figures

        try:
            with self.profiling(server, self.latency_workload):
                figures = measure()
            self.record(run, server.name, self.latency_workload, **figures)
        except Exception as e:
            self.fail(run, server.name, self.latency_workload, _describe(e, server))

    def phase(
        self,
        run: int,
        server: systems.Server,
        workload: str,
        body: Callable[[], workloads.PhaseResult],
    ) -> bool:
        try:
            with self.profiling(server, workload):
                r = body()
        except Exception as e:
            self.fail(run, server.name, workload, _describe(e, server))
            return False
        self.record(
            run,
            server.name,
            workload,
            mb_per_s=r.mb_per_s,
            records_per_s=r.records_per_s,
            cpu_s_per_gb=r.cpu_s_per_gb,
            server_cpu_s=r.server_cpu_s,
            wall_s=r.wall_s,
            records=r.records,
            payload_bytes=r.payload_bytes,
            client_cores=r.client_cpu_s / r.wall_s,
            client_cpu_s_per_gb=r.client_cpu_s_per_gb,
            cpu_ceiling_mb_per_s=report.cpu_ceiling_mb_per_s(
                MACHINE_CPUS, r.cpu_s_per_gb, r.client_cpu_s_per_gb
            ),
            machine_busy=r.machine_busy,
            machine_steal=r.machine_steal,
            disk_written_per_byte=r.disk_written_bytes / max(r.payload_bytes, 1),
            disk_read_per_byte=r.disk_read_bytes / max(r.payload_bytes, 1),
            **({} if r.first_record_s is None else {"first_record_s": r.first_record_s}),
        )
        return True

    def record(self, run: int, system: str, workload: str, **metrics: float) -> None:
        into = self.measurements if self.profile_dir is None else self.profiled
        into.append({"run": run, "system": system, "workload": workload, **metrics})

    def fail(self, run: int, system: str, workload: str, error: str) -> None:
        self.failures.append({"run": run, "system": system, "workload": workload, "error": error})
        tqdm.write(f"FAILED run {run + 1} {system} {workload}: {error}", file=sys.stderr)


def _describe(e: Exception, server: systems.Server) -> str:
    return f"{e!r}; server log tail:\n{server.log_tail(10)}"


def main(argv: list[str] | None = None) -> int:
    args = options.parse_args(argv, __doc__)
    if args.cluster:
        from bench import cluster

        return cluster.main([])
    started, load_at_start = datetime.now(UTC), os.getloadavg()[0]
    out_dir = args.results_dir / started.strftime("%Y%m%dT%H%M%SZ")
    own_work_dir = args.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="tidegate-bench-")) if own_work_dir else args.work_dir
    work_dir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, work_dir, out_dir)
    cache_bytes = bench.tidegate_cache_bytes() if report.TIDEGATE in args.system_list else None
    skipped: list[str] = []
    security_doc: dict[str, Any] | None = None
    try:
        with tqdm(
            total=bench.steps_total(),
            desc="bench",
            unit="step",
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar:
            bench.run(bar)
        exe = systems.tansu_binary(args.cache_dir)
        skipped.append("tansu-postgres: " + systems.tansu_postgres_skip_reason(exe))
        security_doc = _security(args, work_dir)
    finally:
        if own_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    cluster_result = _cluster(args, bench)
    med = report.medians(bench.measurements)
    doc: dict[str, Any] = {
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "systems": args.system_list,
        "versions": bench.versions,
        "machine": f"{platform.node()} {platform.machine()} {MACHINE_CPUS} cpus, "
        f"load average {load_at_start:.1f} at start, {os.getloadavg()[0]:.1f} at end, "
        f"python {platform.python_version()}",
        "client": _client_version(),
        "tuning": vars(bench.tuning),
        "skipped": skipped,
        "measurements": bench.measurements,
        "failures": bench.failures,
        "medians": med,
        "profiles": bench.profiles,
        "profiled_measurements": bench.profiled,
    }
    rss_limit_mb = None
    if cache_bytes is not None:
        doc["tidegate_cache_bytes_max"] = cache_bytes
        rss_limit_mb = (cache_bytes + args.rss_overhead_mib * MIB) / 1e6
    if cluster_result is not None:
        doc["cluster"] = cluster_result
    doc["ratios"] = report.goal_ratios(
        med,
        args.large_bytes,
        args.small_bytes,
        max(args.partition_list),
        bench.latency_workload,
        measurements=bench.measurements,
        rss_limit_mb=rss_limit_mb,
        cpus=MACHINE_CPUS,
    )
    c_ratios, c_targets = cproducer.goal_ratios(
        med, args.small_bytes, args.large_bytes, args.c_partition_list
    )
    _add_goals(doc["ratios"], c_ratios, c_targets)
    if security_doc is not None:
        doc["security"] = security_doc
    paths = report.write_outputs(doc, out_dir)
    c_text = cproducer.markdown(doc)
    with open(paths["markdown"], "a") as md:
        md.write("\n" + c_text)
    print(report.markdown(doc))
    print(c_text)
    security_failed = security_doc is not None and "error" in security_doc
    if security_doc is not None:
        from bench import security

        text = (f"security bench failed: {security_doc['error']}" if security_failed
                else security.markdown(security_doc))
        with open(paths["markdown"], "a") as md:
            md.write("\n" + text + "\n")
        print(text)
    print(f"results: {paths['markdown']} {paths['json']} {paths['plot']}")
    result = {
        "ratios": {k: v for k, v in doc["ratios"].items() if k != "basis"},
        "versions": bench.versions,
        "runs": args.runs,
        "failures": len(bench.failures),
        "results_dir": str(out_dir),
        "security_ratio_to_plaintext": (security_doc or {}).get("ratio_to_plaintext"),
    }
    if cluster_result is not None:
        from bench import cluster

        print("cluster (one node, then three): " + json.dumps(cluster_result))
        print(cluster.summary(cluster_result))
        result["cluster"] = cluster_result
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)
    return 1 if bench.failures or security_failed else 0


def _add_goals(
    ratios: dict[str, Any], figures: dict[str, float | None], targets: dict[str, tuple[str, float]]
) -> None:
    """Adds a phase's figures to ``ratios`` and judges those that have a target."""
    ratios.update(figures)
    for key, (op, threshold) in targets.items():
        v = figures.get(key)
        met = None if v is None else (v >= threshold if op == ">=" else v <= threshold)
        ratios["goals_met"][key] = met
        ratios["targets"][key] = f"{op} {threshold:g}"


def _security(args: argparse.Namespace, work_dir: Path) -> dict[str, Any] | None:
    """Produce through PLAINTEXT, SSL and SASL_SSL listeners (``bench.security``)."""
    if args.security_mb <= 0 or report.TIDEGATE not in args.system_list:
        return None
    from bench import security

    sec_dir = work_dir / "security"
    sec_dir.mkdir(parents=True, exist_ok=True)
    try:
        return security.run(args.security_mb, args.runs, args.large_bytes, sec_dir)
    except Exception as e:  # reported beside the other results, the run goes on
        return {"error": f"{type(e).__name__}: {e}"}


def _cluster(args: argparse.Namespace, bench: Bench) -> dict[str, Any] | None:
    """Issue 26: the same records through one node and through three (ZooKeeper from
    Debian, all on this machine): that the cluster works and what it costs here."""
    if args.cluster_records <= 0 or report.TIDEGATE not in args.system_list:
        return None
    from bench import cluster

    try:
        found: dict[str, Any] = cluster.run(args.cluster_records, 1024, 6)
    except Exception as e:  # noqa: BLE001 - reported as a failed phase
        bench.fail(0, report.TIDEGATE, "cluster", repr(e))
        return None
    return found


def _client_version() -> str:
    import confluent_kafka

    return f"confluent-kafka {confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}"


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    # SystemExit unwinds through the `finally` blocks that stop the servers.
    sys.exit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
