"""One consumer group with members from four client families — kafka-python, aiokafka,
confluent-kafka (librdkafka) and the Java client 4.3.0 — all with the range assignor,
against a real ``tidegate serve``. Members join, leave, crash (``kill -9``) and the
server restarts while records keep coming; every record is delivered exactly once. The
Java member leads (computes the assignment) first; after it crashes, aiokafka leads.

A delivery is a record a member read and whose offset commit the broker acknowledged
(``D`` lines, see ``member.py``). Exactly once means: no record is delivered twice,
and every record is delivered, except that a member killed between an acknowledged
commit and printing it may leave records it had read undelivered in the log (they
are then covered by the group's committed offsets, checked at the end).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.clients.server import Tidegate
from tests.groups.member_process import GroupRun, Member, wait_for
from tests.java.conftest import Java, java, tidegate_groups  # noqa: F401 (fixtures)

TOPIC = "mixed"
GROUP = "mixed-group"
PARTITIONS = 6
PHASE_TIMEOUT_S = 75


def _member_count(server: Tidegate) -> int:
    """Members of the latest generation, from the coordinator's log line."""
    lines = [ln for ln in server.tail(10_000).splitlines() if f"group {GROUP!r} generation" in ln]
    return int(lines[-1].split(": ")[-1].split()[0]) if lines else 0


def _member(name: str, client: str, jvm: Java, server: Tidegate, tmp: Path, *args: str) -> Member:
    return Member(name, client, jvm, server, tmp, TOPIC, GROUP, *(args or ("range",)))


def _wait(cond: Callable[[], bool], what: str, detail: Callable[[], object]) -> float:
    return wait_for(cond, what, detail, PHASE_TIMEOUT_S)


def test_mixed_client_group_exactly_once(java: Java, tidegate_groups: Tidegate, tmp_path: Path) -> None:  # noqa: F811
    server = tidegate_groups
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()
    run = GroupRun(server.bootstrap, TOPIC)
    produced, members = run.produced, run.members
    produce, delivered, all_delivered = run.produce, run.delivered, run.all_delivered

    def start(name: str, client: str) -> Member:
        return run.add(_member(name, client, java, server, tmp_path))

    def progress() -> object:
        return {
            "produced": len(produced), "delivered": len(set(delivered())),
            "members": {m.name: (m.proc.poll(), len(m.lines("D"))) for m in members},
        }

    phases: dict[str, float] = {}
    try:
        # The Java member joins first and leads (it computes the assignment from the
        # Python and librdkafka members' subscriptions) ...
        # Join order decides who leads next, so the first two join one after the other.
        java1 = start("java1", "java")
        _wait(lambda: any(ln.startswith("A ") for ln in java1.log.read_text().splitlines()),
              "the first member's assignment", progress)
        aio1 = start("aio1", "aiokafka")
        _wait(lambda: bool(aio1.lines("R")) or _member_count(server) >= 2, "the second member", progress)
        for name, client in [("kp1", "kafka-python"), ("cf1", "confluent-kafka")]:
            start(name, client)
        produce(200, 4)
        phases["four families"] = _wait(all_delivered, "first deliveries", progress)

        start("java2", "java")  # a member joins
        produce(200, 4)
        phases["join"] = _wait(all_delivered, "deliveries after a join", progress)

        members[2].stop()  # kafka-python leaves (LeaveGroup)
        produce(200, 4)
        phases["leave"] = _wait(all_delivered, "deliveries after a leave", progress)

        # ... and crashes: aiokafka, the next member in join order, leads from then on,
        # with a Java subscription among those it assigns.
        java1.kill9()
        produce(200, 4)
        phases["crash"] = _wait(all_delivered, "deliveries after a crash", progress)

        server.restart()  # committed offsets and the group survive
        produce(200, 4)
        phases["server restart"] = _wait(all_delivered, "deliveries after a restart", progress)
    finally:
        outputs = {m.name: m.finish() for m in members}
    print("seconds from change to every record delivered:", phases)

    for m in members:
        if not m.killed:
            assert "OK closed" in outputs[m.name], (m.name, outputs[m.name][-2000:])
    got = delivered()
    duplicates = {r for r in got if got.count(r) > 1}
    assert not duplicates, f"delivered twice: {sorted(duplicates)[:20]}"
    assert all_delivered()
    assert set(got) <= produced
    for m in members:
        assert m.lines("D"), f"{m.name} ({m.client}) delivered nothing"

    # The Java client led first, aiokafka (next in join order) once the Java leader
    # crashed: both computed assignments from the other families' subscriptions. Who
    # leads after the server restart depends on which member rejoins first.
    leaders = [ln.rsplit("leader ", 1)[1] for ln in server.tail(10_000).splitlines()
               if f"group {GROUP!r} generation" in ln]
    assert leaders[0].startswith("consumer-mixed-group"), leaders
    assert any(ld.startswith("aiokafka") for ld in leaders[1:]), leaders

    # Every partition's committed offset is its end: nothing left behind.
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    committed = admin.list_group_offsets(GROUP)[GROUP]
    admin.close()
    ends = {p: max(o for q, o in produced if q == p) + 1 for p in range(PARTITIONS)}
    assert {tp.partition: om.offset for tp, om in committed.items()} == ends
