"""The fault campaign's CI seed (``tests/cluster/chaos``; ``make chaos`` runs 50 faults):
three nodes under two idempotent producers, a transactional producer aborting every
fifth transaction and a read_committed consumer group, a few seeded faults, then every
partition read back at both isolation levels and every node's log searched for ERRORs and
tracebacks.

Left out of the CI seed until the fixes being made elsewhere are merged (the lead widens it
then; ``make chaos`` runs them all):
- a killed node restarted before its ZooKeeper session ends (``Bounds.down_s`` under the
  session timeout): it gets its containers back at once and never logs ``tidegate ready``,
  its partitions unavailable for minutes ("startup"/"recovery");
- ``kill9-leader`` and ``zookeeper``: partitions unavailable past 10 s and ERROR tracebacks
  (``ContainerNotOwnedError``) in the survivors' logs ("scaling"/"recovery");
- SIGSTOP past the session timeout: the same tracebacks from the thawed node.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.chaos.campaign import Campaign, Config
from tests.cluster.chaos.faults import Bounds

CI_KINDS = ("kill9", "kill9-wipe", "sigstop")


@pytest.mark.timeout(420)
def test_a_short_seeded_fault_campaign_finds_no_violation(tmp_path: Path) -> None:
    config = Config(
        seed=2, faults=3, work_dir=tmp_path, kinds=CI_KINDS,
        bounds=Bounds(down_s=(8.0, 12.0), pause_s=(3.0, 5.0)), gap_s=(8.0, 12.0),
        unavailable_max_s=30.0, drain_timeout_s=60.0,
    )
    report = Campaign(config).run()
    print(report.text())
    assert not report.violations, report.text()
