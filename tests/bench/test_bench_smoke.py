"""`python -m bench.run` end to end with tiny sizes, against Tansu and `tidegate serve`.

This checks the harness, not performance: every phase runs on both systems, every record
comes back, and the outputs (Markdown, JSON, PNG, the `RESULT` line) are there.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import report

REPO = Path(__file__).resolve().parents[2]
#: A bench run's limit: each takes a minute or two alone, several on a machine at load 15.
RUN_TIMEOUT_S = 300

TINY = [
    "--runs", "1",
    "--cluster-records", "0",  # bench.cluster has a smoke test of its own
    "--large-mb", "2",
    "--small-records", "20000",
    "--partitions", "1,4",
    "--producers", "2",
    "--latency-mbps", "1",
    "--latency-seconds", "1",
    "--latency-warmup-seconds", "0.2",
    "--disk-mb", "4",
    "--loopback-mb", "16",
    "--phase-timeout-s", "40",
    "--compaction-records", "3000",
    "--compaction-keys", "300",
    "--compaction-settle-s", "2",
    "--security-mb", "2",
    "--c-small-records", "20000",
    "--c-large-records", "2000",
]  # fmt: skip


def _run_bench(args: list[str], tmp_path: Path) -> dict[str, Any]:
    """``python -m bench.run`` with ``args``, results and work under ``tmp_path``: it must
    succeed and end with its ``RESULT`` line, whose JSON is returned."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", *args, "--results-dir", str(tmp_path / "results"),
         "--work-dir", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT "), last
    result: dict[str, Any] = json.loads(last.removeprefix("RESULT "))
    return result


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_bench_runs_both_systems(tmp_path: Path) -> None:
    results = tmp_path / "results"
    result = _run_bench(TINY, tmp_path)
    assert result["failures"] == 0
    assert set(result["versions"]) == {report.PEER, report.TIDEGATE}
    c_goals = {f"cproduce_{size}_p{parts}_cpu_per_gb_tansu_over_tidegate"
               for size in ("100b", "1k") for parts in (1, 4)}
    c_goals |= {f"cproduce_100b_p{parts}_vs_tansu_memory" for parts in (1, 4)}
    assert set(result["ratios"]["goals_met"]) == set(report.GOALS) | {report.RSS_GOAL} | c_goals

    (out_dir,) = results.iterdir()
    doc = json.loads((out_dir / "results.json").read_text())
    markdown = (out_dir / "results.md").read_text()
    assert markdown.startswith("# tidegate benchmark")
    assert result["ratios"]["txn_produce_1k_vs_plain"] > 0
    assert "Transactions: txn-produce-1024B-p4 (a commit every 100 ms)" in markdown
    assert result["ratios"]["txn_produce_1k_per_records_vs_plain"] > 0
    assert "Transactions: txn1000r-produce-1024B-p4 (a commit every 1000 records" in markdown
    disk_rounds = [
        report._fmt(m["mb_per_s"])
        for m in sorted(doc["measurements"], key=lambda m: m["run"])
        if m["workload"] == "disk-fdatasync-1MiB"
    ]
    assert f" | {', '.join(disk_rounds)} |" in markdown  # every round's baseline shown
    assert (out_dir / "throughput_latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    compaction = doc["medians"][report.TIDEGATE]["compaction-1024B-p1"]
    assert compaction["cleaner_passes"] >= 1 and compaction["cleaning_mb_s"] > 0
    assert 300 <= compaction["records_left"] < 3000  # cleaned: the latest of 300 keys, the head
    assert "## Compaction" in markdown
    med = doc["medians"]
    for system in (report.PEER, report.TIDEGATE):
        for size, records in ((1024, 2 * 1024 * 1024 // 1024), (100, 20_000)):
            for parts in (1, 4):
                produced = med[system][f"produce-{size}B-p{parts}"]
                consumed = med[system][f"consume-{size}B-p{parts}"]
                assert produced["records"] == consumed["records"] == records
                assert consumed["payload_bytes"] == records * size
        for size, records in ((1024, 2000), (100, 20_000)):  # the C producer's phase
            for parts in (1, 4):
                assert med[system][f"cproduce-{size}B-p{parts}"]["records"] == records
        assert med[system]["latency-1024B-p1"]["produce_p99_ms"] > 0
        if system == report.TIDEGATE:  # transactional produce beside plain produce
            for parts in (1, 4):
                assert med[system][f"txn-produce-1024B-p{parts}"]["records"] == 2 * 1024
                assert med[system][f"txn1000r-produce-1024B-p{parts}"]["records"] == 2 * 1024
        else:
            assert not any(w.startswith("txn-") for w in med[system])
        assert med[system]["server"]["peak_rss_mb"] > 0
    # tidegate's own share of the latency, from its /metrics; Tansu serves none.
    assert med[report.TIDEGATE]["latency-1024B-p1"]["server_produce_p99_ms"] > 0
    assert med[report.TIDEGATE]["latency-1024B-p1"]["tier1_sync_p99_ms"] > 0
    assert "server_produce_p99_ms" not in med[report.PEER]["latency-1024B-p1"]
    assert "| server's produce p99 | Tier-1 sync p99 |" in markdown
    assert med["baseline"]["disk-fdatasync-1MiB"]["mb_per_s"] > 0
    assert med["baseline"]["loopback-tcp"]["mb_per_s"] > 0
    assert any("tansu-postgres" in note for note in doc["skipped"])
    # Produce through TLS and SASL_SSL listeners beside PLAINTEXT (bench/security.py).
    assert "## C producer (issue 37 goal 1" in markdown
    assert "### Produce by listener" in markdown
    assert set(doc["security"]["median_mb_per_s"]) == {"PLAINTEXT", "SSL", "SASL_SSL"}
    assert result["security_ratio_to_plaintext"]["SASL_SSL"] > 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_segmentstore_bench_runs(tmp_path: Path) -> None:
    """`python -m bench.segmentstore` (issue 2's figures) end to end at a small scale (large
    enough for its replay case to catch Tier-2 writes made before the restart)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.segmentstore", "--scale", "0.05", "--disk-mb", "4",
         "--writers", "16", "--dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    result = json.loads(last.removeprefix("RESULT "))
    assert len(result["cases"]) == 9 and all(c["mb_per_s"] > 0 for c in result["cases"])
    assert result["replay_1kb_mb_per_s"] > 0 and result["replay_64kb_mb_per_s"] > 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_compare_runs_a_commit_beside_the_working_tree(tmp_path: Path) -> None:
    """`--compare REF` adds `tidegate@REF`, served from that commit's unpacked code and
    alternated with the working tree's; an unknown ref is refused before anything runs."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    results = tmp_path / "results"
    args = ["--systems", "tidegate", "--compare", "HEAD", "--runs", "1", "--large-mb", "1",
            "--small-records", "0", "--partitions", "1", "--latency-mbps", "1",
            "--latency-seconds", "0.5", "--latency-warmup-seconds", "0.1", "--disk-mb", "4",
            "--loopback-mb", "4", "--phase-timeout-s", "40"]  # fmt: skip
    result = _run_bench(args, tmp_path)
    assert result["versions"]["tidegate@HEAD"] == f"tidegate {commit[:12]}"
    (out_dir,) = results.iterdir()
    med = json.loads((out_dir / "results.json").read_text())["medians"]
    for system in ("tidegate", "tidegate@HEAD"):
        assert med[system]["produce-1024B-p1"]["records"] == 1024
    assert any(p.name.startswith("tidegate-HEAD-") for p in (out_dir / "logs").iterdir())
    tree = REPO / ".cache" / "bench" / "trees" / commit
    assert (tree / "tidegate" / "gateway" / "cli.py").exists() and (tree / ".complete").exists()

    bad = subprocess.run(
        [sys.executable, "-m", "bench.run", "--compare", "no-such-ref"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "not a commit of this repository" in bad.stderr


def test_append_floor_measures_the_event_loop_alone() -> None:
    """`python -m bench.append_floor` (issue 2's floor) at a small scale: every append
    completes, and the figures are there."""
    from bench.append_floor import main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["--writers", "8", "--appends-per-writer", "50"])
    last = out.getvalue().strip().splitlines()[-1]
    result = json.loads(last.removeprefix("RESULT "))
    assert result["appends"] == 400
    assert result["cpu_us_per_append"] > 0 and result["appends_per_s"] > 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_cluster_bench_runs(tmp_path: Path) -> None:
    """``make bench``'s last part: the same records through one node, then three."""
    from bench import cluster

    found = cluster.run(3000, 1024, 6)
    assert found["tier1"].startswith("replicated")
    for nodes in ("one_node", "three_nodes"):
        assert found[nodes]["consumed"] == 3000
        assert found[nodes]["produce_mb_s"] > 0 and found[nodes]["consume_mb_s"] > 0
        assert 0 < found[nodes]["p50_ms"] <= found[nodes]["p99_ms"]
    assert set(found["three_nodes"]["cpu_s_per_gb"]) == {"node-1", "node-2", "node-3", "zookeeper"}
    assert found["ratio"] > 0 and "goal" in cluster.summary(found)



@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_txn_breakdown_runs() -> None:
    """`python -m bench.txn_breakdown` at a tiny size: each mode delivers every record
    (it raises otherwise) and reports its time, CPU and the APIs each one sent."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.txn_breakdown", "--rounds", "1", "--transactions", "3",
         "--records-per-txn", "100", "--partitions", "4"],
        cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1].removeprefix("RESULT "))
    txn = result["medians"]["txn"]
    assert txn["mb_s"] > 0 and txn["commit_ms_per_txn"] > 0
    assert txn["requests"]["EndTxn"]["per_txn"] >= 1
    assert txn["requests"]["AddPartitionsToTxn"]["per_txn"] >= 1
    assert "EndTxn" not in result["medians"]["plain"]["requests"]
