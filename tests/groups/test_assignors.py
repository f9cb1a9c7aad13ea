"""The server-side assignors (``uniform``, ``range``) as properties: every subscribed
partition goes to exactly one subscribed member; ``uniform`` keeps members that could
swap partitions within one of each other and moves few partitions when one member
joins; ``range`` is Kafka's (KAFKA-16944): contiguous ranges with static members first
by instance id, then the others by member id, co-partitioned, a function of the
membership alone (not sticky), and unchanged when a static member rejoins under a new
member id (what Kafka's testStaticMembership and testMixedStaticMembership check)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tidegate.gateway.groups.assignors import AssignmentSpec, range_, uniform

TOPICS = ["a", "b", "c"]

members_st = st.lists(
    st.frozensets(st.sampled_from(TOPICS), min_size=1), min_size=1, max_size=8
).map(lambda subs: [AssignmentSpec(f"m{i}", s) for i, s in enumerate(subs)])
partitions_st = st.fixed_dictionaries({t: st.integers(0, 12) for t in TOPICS})


def _check_complete(members: list[AssignmentSpec], partitions: dict[str, int], out: dict) -> None:  # type: ignore[type-arg]
    owners: dict[tuple[str, int], str] = {}
    for mid, a in out.items():
        spec = next(m for m in members if m.member_id == mid)
        for topic, ps in a.items():
            assert topic in spec.subscribed
            for p in ps:
                assert (topic, p) not in owners
                owners[(topic, p)] = mid
    wanted = {(t, p) for t, n in partitions.items() for p in range(n)
              if any(t in m.subscribed for m in members)}
    assert set(owners) == wanted


@settings(max_examples=200, deadline=None)
@given(members_st, partitions_st)
def test_uniform_complete_and_balanced(members: list[AssignmentSpec], partitions: dict[str, int]) -> None:
    out = uniform(members, partitions, {})
    _check_complete(members, partitions, out)
    count = {mid: sum(len(ps) for ps in a.values()) for mid, a in out.items()}
    for mid, a in out.items():
        for topic, ps in a.items():
            for other in members:
                if topic in other.subscribed and ps:
                    assert count[other.member_id] >= count[mid] - 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(0, 30))
def test_uniform_is_sticky_when_a_member_joins(n: int, parts: int) -> None:
    members = [AssignmentSpec(f"m{i}", frozenset({"a"})) for i in range(n)]
    before = uniform(members, {"a": parts}, {})
    after = uniform(members + [AssignmentSpec("new", frozenset({"a"}))], {"a": parts}, before)
    moved = sum(len(before[m.member_id].get("a", frozenset()) - after[m.member_id].get("a", frozenset()))
                for m in members)
    assert moved == len(after["new"].get("a", frozenset()))  # only what the newcomer takes moves
    assert len(after["new"].get("a", frozenset())) == parts // (n + 1)


# members, some static (instance ids unique, in an order unrelated to member ids)
static_members_st = st.lists(
    st.tuples(st.frozensets(st.sampled_from(TOPICS), min_size=1), st.booleans()), min_size=1, max_size=8
).map(lambda subs: [AssignmentSpec(f"m{i}", s, f"i{len(subs) - i}" if static else None)
                    for i, (s, static) in enumerate(subs)])


def _kafka_order(members: list[AssignmentSpec]) -> list[str]:
    static = sorted((m for m in members if m.instance_id is not None), key=lambda m: str(m.instance_id))
    dynamic = sorted((m for m in members if m.instance_id is None), key=lambda m: m.member_id)
    return [m.member_id for m in static + dynamic]


@settings(max_examples=200, deadline=None)
@given(static_members_st, partitions_st)
def test_range_complete_and_contiguous_in_kafka_order(
    members: list[AssignmentSpec], partitions: dict[str, int]
) -> None:
    out = range_(members, partitions, {})
    _check_complete(members, partitions, out)
    assert set(out) == {m.member_id for m in members}
    order = _kafka_order(members)
    for topic, n in partitions.items():
        subs = [mid for mid in order if any(m.member_id == mid and topic in m.subscribed for m in members)]
        ranges = [sorted(out[mid].get(topic, frozenset())) for mid in subs]
        flat = [p for r in ranges for p in r]
        assert flat == (list(range(n)) if subs else [])
        for r in ranges:
            assert r == list(range(r[0], r[0] + len(r))) if r else True
        sizes = [len(r) for r in ranges]
        assert sizes == sorted(sizes, reverse=True) and (not sizes or max(sizes) - min(sizes) <= 1)


@settings(max_examples=200, deadline=None)
@given(static_members_st, st.integers(0, 12), st.randoms(use_true_random=False))
def test_range_co_partitions_and_ignores_history_and_input_order(
    members: list[AssignmentSpec], n: int, rnd: object
) -> None:
    """Topics with the same subscribers and partition count give every member the same
    partition numbers; the previous target and the members' order change nothing."""
    partitions = {"a": n, "b": n, "c": n}
    out = range_(members, partitions, {})
    for m in members:
        by_topic = {t: out[m.member_id].get(t, frozenset()) for t in m.subscribed}
        for t1 in m.subscribed:
            for t2 in m.subscribed:
                same_subscribers = all((t1 in o.subscribed) == (t2 in o.subscribed) for o in members)
                if same_subscribers:
                    assert by_topic[t1] == by_topic[t2]
    shuffled = list(members)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    previous = {m.member_id: {"a": frozenset(range(n))} for m in members}
    assert range_(shuffled, partitions, previous) == out


@settings(max_examples=200, deadline=None)
@given(static_members_st, partitions_st, st.data())
def test_range_static_member_rejoining_keeps_every_assignment(
    members: list[AssignmentSpec], partitions: dict[str, int], data: st.DataObject
) -> None:
    static = [m for m in members if m.instance_id is not None]
    if not static:
        return
    gone = data.draw(st.sampled_from(static))
    before = range_(members, partitions, {})
    back = AssignmentSpec("zz-new-member-id", gone.subscribed, gone.instance_id)
    after = range_([m for m in members if m is not gone] + [back], partitions, before)
    assert after.pop(back.member_id) == before.pop(gone.member_id)
    assert after == before


def _spec(mid: str, *topics: str, instance: str | None = None) -> AssignmentSpec:
    return AssignmentSpec(mid, frozenset(topics), instance)


def _fs(*ps: int) -> frozenset[int]:
    return frozenset(ps)


def test_range_matches_kafkas_own_examples() -> None:
    """The expected assignments of Kafka's RangeAssignorTest, same inputs."""
    three = [_spec("A", "t1", "t2"), _spec("B", "t3"), _spec("C", "t2", "t3")]
    assert range_(three, {"t1": 3, "t2": 3, "t3": 2}, {}) == {
        "A": {"t1": _fs(0, 1, 2), "t2": _fs(0, 1)},
        "B": {"t3": _fs(0)},
        "C": {"t2": _fs(2), "t3": _fs(1)},
    }
    more_members = [_spec(m, "t1", "t3") for m in "ABC"]
    assert range_(more_members, {"t1": 3, "t3": 2}, {}) == {
        "A": {"t1": _fs(0), "t3": _fs(0)},
        "B": {"t1": _fs(1), "t3": _fs(1)},
        "C": {"t1": _fs(2)},
    }
    # A member joins: recomputed, so B gives up partition 2 for partition 1 (not sticky;
    # Kafka's own testMemberReplacementStickiness is disabled for range for this reason).
    previous = {"A": {"t1": _fs(0, 1), "t2": _fs(0, 1)}, "B": {"t1": _fs(2), "t2": _fs(2)}}
    joined = [_spec(m, "t1", "t2") for m in "ABC"]
    assert range_(joined, {"t1": 3, "t2": 3}, previous) == {
        m: {"t1": _fs(i), "t2": _fs(i)} for i, m in enumerate("ABC")
    }
    # Static members first by instance id, then dynamic ones by member id.
    mixed = [_spec("a", "t", instance="z"), _spec("b", "t"), _spec("c", "t", instance="y")]
    assert range_(mixed, {"t": 5}, {}) == {"c": {"t": _fs(0, 1)}, "a": {"t": _fs(2, 3)}, "b": {"t": _fs(4)}}
