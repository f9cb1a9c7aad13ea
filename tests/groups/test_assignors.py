"""The server-side assignors (``uniform``, ``range``) as properties: every subscribed
partition goes to exactly one subscribed member; ``uniform`` keeps members that could
swap partitions within one of each other and moves few partitions when one member
joins; ``range`` gives contiguous ranges in member-id order."""

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


@settings(max_examples=200, deadline=None)
@given(members_st, partitions_st)
def test_range_complete_and_contiguous(members: list[AssignmentSpec], partitions: dict[str, int]) -> None:
    out = range_(members, partitions, {})
    _check_complete(members, partitions, out)
    for topic, n in partitions.items():
        subs = sorted(m.member_id for m in members if topic in m.subscribed)
        ranges = [sorted(out[mid].get(topic, frozenset())) for mid in subs]
        flat = [p for r in ranges for p in r]
        assert flat == list(range(n)) if subs else True
        sizes = [len(r) for r in ranges]
        assert sizes == sorted(sizes, reverse=True) and (not sizes or max(sizes) - min(sizes) <= 1)
