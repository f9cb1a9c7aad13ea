"""The fault campaign's CI seed (``tests/cluster/chaos``; ``make chaos`` runs 50 faults):
three nodes under two idempotent producers, a transactional producer aborting every
fifth transaction and a read_committed consumer group, a few seeded faults, then every
partition read back at both isolation levels and every node's log searched for ERRORs and
tracebacks.

CI draws two faults from ``zookeeper`` (ZooKeeper stopped for a few seconds) and
``sigstop`` (a node frozen for 8-15 s, past its ZooKeeper session), and allows partitions
30 s to acknowledge again after each (``make chaos`` checks the 10 s aim). SIGSTOP came
back after its loss was fixed (``ProducerStates.is_copy``: a returning node left records
another node had acknowledged out of its index) and twelve seeds of three such faults
found no violation of correctness. Left out of CI until they pass ``make chaos`` runs:
- ``kill9``, ``kill9-leader``, ``kill9-wipe``: acknowledged records were now and then
  stored twice (``tests/cluster/test_idempotence_failover.py``, whose three causes found
  are fixed; not yet tried again in ``make chaos``);
- the hot topic (auto-scaling a segment the controller leader does not own), which needs
  more than the auto-scaler's one-minute cooldown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.chaos.campaign import Campaign, Config
from tests.cluster.chaos.faults import Bounds

CI_KINDS: tuple[str, ...] = ("zookeeper", "sigstop")
CI_FAULTS = 2


@pytest.mark.timeout(420)
def test_the_campaign_ci_seed_finds_no_violation(tmp_path: Path) -> None:
    config = Config(
        seed=2, faults=CI_FAULTS, work_dir=tmp_path, kinds=CI_KINDS,
        bounds=Bounds(pause_s=(8.0, 15.0), zookeeper_down_s=(1.0, 3.0)), gap_s=(15.0, 20.0),
        unavailable_max_s=30.0, drain_timeout_s=60.0, hot_topic=False,
    )
    report = Campaign(config).run()
    print(report.text())
    assert not report.violations, report.text()
