"""Container assignment: balanced and sticky.

Every container has exactly one owner among the live nodes; owners differ by at most one
container; a container stays where it is unless its owner left or holds more than its
share. So a node joining takes only the containers it needs from the fullest nodes, and a
node leaving hands only its own containers out, each to the emptiest node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def assign(current: Mapping[int, int], container_count: int, live: Iterable[int]) -> dict[int, int]:
    """The new owner of each container ``0..container_count-1`` given the current map and
    the live node ids; empty when no node is live. Deterministic for equal inputs."""
    nodes = sorted(set(live))
    if not nodes:
        return {}
    base, extra = divmod(container_count, len(nodes))
    held: dict[int, list[int]] = {n: [] for n in nodes}
    orphans: list[int] = []
    for cid in range(container_count):
        owner = current.get(cid)
        if owner in held:
            held[owner].append(cid)
        else:
            orphans.append(cid)
    # Nodes already holding the most keep the extra slots: fewest moves.
    by_load = sorted(nodes, key=lambda n: (-len(held[n]), n))
    quota = {n: base + (1 if i < extra else 0) for i, n in enumerate(by_load)}
    for n in nodes:
        while len(held[n]) > quota[n]:
            orphans.append(held[n].pop())
    orphans.sort()
    for cid in orphans:
        n = min(nodes, key=lambda m: (len(held[m]) - quota[m], len(held[m]), m))
        held[n].append(cid)
    return {cid: n for n in nodes for cid in held[n]}


def moves(before: Mapping[int, int], after: Mapping[int, int]) -> int:
    """How many containers changed owner (for logs and tests)."""
    return sum(1 for cid, n in after.items() if before.get(cid) != n)
