"""The options of ``python -m bench.run`` (``make bench``): which systems and phases run,
their sizes, and where results go."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import report, systems

RESULTS_DIR = systems.REPO_ROOT / "bench" / "results"
ALL_SYSTEMS = (report.PEER, report.TIDEGATE)


def parse_args(argv: list[str] | None, description: str | None) -> argparse.Namespace:
    """``python -m bench.run``'s options, checked (systems, commits to compare)."""
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--cluster", action="store_true",
        help="instead: only one node against a cluster of three (bench/cluster.py)",
    )
    p.add_argument(
        "--cluster-records", type=int, default=100_000,
        help="after the run, one tidegate node against a cluster of three with this many "
        "1 KB records over 6 partitions (bench/cluster.py); 0 skips it",
    )
    p.add_argument("--runs", type=int, default=3, help="rounds; medians are quoted")
    p.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help=f"comma-separated, from {', '.join(ALL_SYSTEMS)}",
    )
    p.add_argument("--large-bytes", type=int, default=1024, help="the '1 KB' record size")
    p.add_argument("--small-bytes", type=int, default=100, help="the '100 B' record size")
    p.add_argument(
        "--large-mb", type=float, default=256.0, help="MiB produced per large-record case (0: none)"
    )
    p.add_argument(
        "--small-records",
        type=int,
        default=2_000_000,
        help="records produced per small-record case (0: none)",
    )
    p.add_argument(
        "--security-mb", type=float, default=64.0,
        help="MiB produced per listener and round through PLAINTEXT, SSL and SASL_SSL "
        "(bench/security.py; 0: skipped)",
    )
    p.add_argument("--partitions", default="1,16", help="partition counts to test")
    p.add_argument(
        "--c-small-records", type=int, default=1_000_000,
        help="issue 37's C producer phase (bench/cproducer.c): 100 B records per case "
        "(0: none)",
    )
    p.add_argument(
        "--c-large-records", type=int, default=200_000,
        help="the C producer phase: 1 KB records per case (0: none)",
    )
    p.add_argument(
        "--c-partitions", default="1,4", help="the C producer phase's partition counts"
    )
    p.add_argument(
        "--c-issue-sizes", action="store_true",
        help="the C producer phase at issue 37's sizes: 3,000,000 records of 100 B and "
        "500,000 of 1 KB",
    )
    p.add_argument("--producers", type=int, default=2, help="producer processes per case")
    p.add_argument(
        "--consumers", type=int, default=2, help="consumer processes (at most one per partition)"
    )
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-bytes", type=int, default=1_000_000)
    p.add_argument(
        "--fetch-wait-max-ms",
        type=int,
        default=500,
        help="consumers' fetch.wait.max.ms (librdkafka's default)",
    )
    p.add_argument(
        "--fetch-queue-backoff-ms",
        type=int,
        default=10,
        help="consumers' fetch.queue.backoff.ms (librdkafka: 1000, a 1 s pause whenever "
        "100,000 records are queued)",
    )
    p.add_argument(
        "--txn-commit-ms",
        type=int,
        default=100,
        help="tidegate only: each large-record case is produced again by transactional "
        "producers committing this often (0: not run)",
    )
    p.add_argument(
        "--txn-commit-records",
        type=int,
        default=1000,
        help="tidegate only: and again by transactional producers committing every this "
        "many records each (phase txn{N}r-produce-...; 0: not run)",
    )
    p.add_argument(
        "--compaction-records",
        type=int,
        default=30_000,
        help="tidegate only: 1 KB records over --compaction-keys keys into a compacted "
        "topic while its cleaner runs (bench/compaction.py); 0: not run",
    )
    p.add_argument("--compaction-keys", type=int, default=3_000)
    p.add_argument(
        "--compaction-settle-s", type=float, default=4.0, help="cleaner passes after producing"
    )
    p.add_argument("--latency-mbps", type=float, default=5.0, help="offered MB/s (1e6 B/s)")
    p.add_argument("--latency-seconds", type=float, default=10.0, help="0 skips the latency phase")
    p.add_argument("--latency-warmup-seconds", type=float, default=2.0)
    p.add_argument(
        "--disk-mb", type=float, default=256.0, help="MiB written for the fdatasync baseline"
    )
    p.add_argument(
        "--loopback-mb", type=float, default=1024.0, help="MiB sent for the loopback TCP baseline"
    )
    p.add_argument("--phase-timeout-s", type=float, default=300.0)
    p.add_argument("--ready-timeout-s", type=float, default=60.0)
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where data directories and the disk baseline go (default: a temp dir)",
    )
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--cache-dir", type=Path, default=systems.DEFAULT_CACHE_DIR)
    p.add_argument(
        "--tidegate-config",
        type=Path,
        default=None,
        help="TOML passed to `tidegate serve --config` (else one setting only the cache)",
    )
    p.add_argument(
        "--tidegate-cache-mib",
        type=float,
        default=256.0,
        help="store.cache_bytes_max given to tidegate when no --tidegate-config is given",
    )
    p.add_argument(
        "--rss-overhead-mib",
        type=float,
        default=256.0,
        help="fixed RSS allowed on top of the cache by the memory goal",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="one extra tidegate pass, not in the medians, each phase sampled by py-spy",
    )
    p.add_argument("--profile-rate-hz", type=int, default=100, help="py-spy samples per second")
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="REF",
        help="also run tidegate as of this git commit (system `tidegate@REF`), alternated "
        "with the others; repeatable",
    )
    args = p.parse_args(argv)
    args.system_list = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(args.system_list) - set(ALL_SYSTEMS)
    if unknown or not args.system_list:
        p.error(f"unknown systems: {sorted(unknown)}")
    for ref in args.compare:
        if systems.resolve_commit(ref) is None:
            p.error(f"--compare {ref}: not a commit of this repository")
    args.system_list += [f"{report.TIDEGATE}@{ref}" for ref in args.compare]
    args.partition_list = [int(x) for x in args.partitions.split(",")]
    args.c_partition_list = [int(x) for x in args.c_partitions.split(",") if x.strip()]
    if args.c_issue_sizes:
        args.c_small_records, args.c_large_records = 3_000_000, 500_000
    return args
