"""``python -m tests.cluster.chaos --seed N --faults K``: one campaign, its report on
stdout, exit status 1 on any violation."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.cluster.chaos.campaign import Campaign, Config
from tests.cluster.chaos.faults import KINDS, Bounds


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=50)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {','.join(KINDS)}")
    parser.add_argument("--gap-s", type=float, nargs=2, default=(20.0, 30.0), metavar=("MIN", "MAX"),
                        help="seconds between faults")
    parser.add_argument("--down-s", type=float, nargs=2, default=(0.0, 5.0), metavar=("MIN", "MAX"),
                        help="how long a killed node stays down")
    parser.add_argument("--zookeeper-down-s", type=float, nargs=2, default=(3.0, 10.0),
                        metavar=("MIN", "MAX"), help="how long ZooKeeper stays stopped")
    parser.add_argument("--pause-s", type=float, nargs=2, default=(10.0, 30.0), metavar=("MIN", "MAX"),
                        help="how long SIGSTOP lasts")
    parser.add_argument("--unavailable-max-s", type=float, default=10.0,
                        help="longest a partition may go without acknowledging after a fault")
    parser.add_argument("--work-dir", type=Path, help="kept afterwards (default: a temporary one, deleted)")
    args = parser.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KINDS)}")

    def run(work_dir: Path) -> int:
        config = Config(
            seed=args.seed, faults=args.faults, work_dir=work_dir, kinds=kinds,
            bounds=Bounds(tuple(args.down_s), tuple(args.pause_s), tuple(args.zookeeper_down_s)), gap_s=tuple(args.gap_s),
            unavailable_max_s=args.unavailable_max_s,
        )
        report = Campaign(config).run()
        print(report.text(), flush=True)
        return 1 if report.violations else 0

    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        return run(args.work_dir)
    with tempfile.TemporaryDirectory(prefix="tidegate-chaos-") as tmp:
        return run(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
