"""How a serving node keeps the garbage collector's pauses short.

A full collection scans every object the collector tracks, and a node with 10,000
partitions holds hundreds of thousands of long-lived ones (segment metadata, read
indexes, controller records), so one full collection stalled the event loop for longer
than any request may (issue 22, finding 4). ``freeze_long_lived`` collects once and
freezes what start-up built, and from then on freezes the survivors of every full
collection as it ends: at that moment every generation has just been collected, so only
live objects are frozen, and the next full collection scans only what came since. Full
collections also come more often than Python's default (``FULL_EVERY``): an operation
over 10,000 partitions makes tens of thousands of lasting objects, and one collection
scanning all of them at once took longer on the loop than a slice of the operation.

The cost: an object frozen while alive that later becomes garbage *inside a reference
cycle* is never reclaimed (plain reference counting still frees everything else). The
server's own objects do not rely on the cycle collector (``tests/gateway/
test_connection_cycles.py`` checks that closed connections are freed without it).
"""

from __future__ import annotations

import gc
from typing import Any

_FULL = 2
#: A full collection after this many collections of the middle generation (Python's
#: default is 10): it scans everything since the last one, so more often is shorter.
FULL_EVERY = 2


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == _FULL:
        gc.freeze()


def freeze_long_lived() -> None:
    """Collect, freeze, and freeze the survivors of each later full collection."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)
