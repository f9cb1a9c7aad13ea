"""One call of each KIP-848 server-side assignor, in process: what the event loop is
blocked for when a consumer group's target assignment is recomputed.

500 members (``--members``) over the shapes below; each figure is the median of
``--repeats`` calls, in ms. "join"/"leave" start from the previous target (only
``uniform`` reads it). Run: ``python -m bench.assignors``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from tidegate.gateway.groups.assignors import AssignmentSpec, range_, uniform

Assignor = Callable[..., dict]  # type: ignore[type-arg]


def _median_ms(assign: Assignor, args: tuple[object, ...], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        assign(*args)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _shapes(n: int) -> list[tuple[str, list[AssignmentSpec], dict[str, int]]]:
    two = {"a": 5000, "b": 5000}
    many = {f"t{i}": 10 for i in range(1000)}
    rnd = random.Random(1)
    return [
        ("one subscription, 2 topics x 5,000", [AssignmentSpec(f"m{i:04d}", frozenset(two)) for i in range(n)], two),
        ("one subscription, 1,000 topics x 10", [AssignmentSpec(f"m{i:04d}", frozenset(many)) for i in range(n)], many),
        ("static members (instance ids), 2 topics x 5,000",
         [AssignmentSpec(f"m{i:04d}", frozenset(two), f"inst-{n - i}") for i in range(n)], two),
        ("half to both of 2 x 5,000, half to one",
         [AssignmentSpec(f"m{i:04d}", frozenset(two) if i % 2 else frozenset({"a"})) for i in range(n)], two),
        ("each member 100 random topics of 1,000 x 10",
         [AssignmentSpec(f"m{i:04d}", frozenset(rnd.sample(sorted(many), 100))) for i in range(n)], many),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print("| shape | assignor | from scratch | a member joins | a member leaves |")
    print("|---|---|---:|---:|---:|")
    assignors: list[tuple[str, Assignor]] = [("range", range_), ("uniform", uniform)]
    for label, members, parts in _shapes(args.members):
        for name, assign in assignors:
            prev = assign(members, parts, {})
            newcomer = AssignmentSpec("new", members[0].subscribed)
            cells = [
                _median_ms(assign, (members, parts, {}), args.repeats),
                _median_ms(assign, ([*members, newcomer], parts, prev), args.repeats),
                _median_ms(assign, (members[1:], parts, prev), args.repeats),
            ]
            print(f"| {label} | {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
