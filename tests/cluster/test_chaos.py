"""The fault campaign's CI seed (``tests/cluster/chaos``; ``make chaos`` runs 50 faults):
three nodes under two idempotent producers, a transactional producer aborting every
fifth transaction and a read_committed consumer group, a few seeded faults, then every
partition read back at both isolation levels and every node's log searched for ERRORs and
tracebacks.

Left out of the CI seed, because each fails today (seen on this branch; the lead widens it
as the fixes being made elsewhere are merged; ``make chaos`` runs every kind):
- ``kill9``, ``kill9-leader``, ``kill9-wipe``: the restarted node never logs ``tidegate
  ready``: its offset-index rebuild waits without a deadline on a remote segment read
  (``gateway/log/partitions.py`` ``_read_exact`` -> ``core/segmentstore/remote/client.py``
  ``_call``), its partitions unavailable for minutes ("startup"/"recovery"); once, acked
  idempotent records stored twice after a wiped node's containers moved ("txnfence");
- ``sigstop`` (even of 1 to 5 s) and ZooKeeper down past the session timeout: partitions
  unavailable for 30 to 90 s, containers left "failed", ERROR tracebacks
  (``ContainerNotOwnedError``, ``StoreShutdownError``, a storage writer stopped by
  ``ConnectionLoss``) ("recovery"/"scaling");
- the hot topic (auto-scaling a segment the controller leader does not own: "scaling"),
  which also needs more than the auto-scaler's one-minute cooldown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.chaos.campaign import Campaign, Config
from tests.cluster.chaos.faults import Bounds

CI_KINDS = ("zookeeper",)


@pytest.mark.timeout(420)
def test_a_short_seeded_fault_campaign_finds_no_violation(tmp_path: Path) -> None:
    config = Config(
        seed=2, faults=3, work_dir=tmp_path, kinds=CI_KINDS,
        bounds=Bounds(zookeeper_down_s=(2.0, 4.0)), gap_s=(8.0, 12.0),
        unavailable_max_s=10.0, drain_timeout_s=60.0, hot_topic=False,
    )
    report = Campaign(config).run()
    print(report.text())
    assert not report.violations, report.text()
