"""A fault-injecting Tier-2 ``Storage`` wrapper for transient-error tests.

``FaultyStorage(inner, seed, error_rate)`` fails each call with probability
``error_rate`` (drawn from ``random.Random(seed)``, so a run is reproducible) by raising
a plain ``StorageError`` — the contract's "transient, worth retrying" error. A failure is
injected *before* the call reaches ``inner``, so a failed call has no effect, which is
what the contract promises for a failed ``write``. ``after_call`` failures (the call took
effect, the answer was lost) are injected too when ``lost_reply_rate`` is set, to test
that callers reconcile with ``get_info`` instead of assuming nothing happened.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator

from tidegate.tier2.api import SegmentInfo, Storage, StorageError, WriteData


class InjectedStorageError(StorageError):
    """A transient failure injected by ``FaultyStorage``."""


class FaultyStorage:
    def __init__(
        self, inner: Storage, seed: int, error_rate: float, *, lost_reply_rate: float = 0.0
    ) -> None:
        self.inner = inner
        self._random = random.Random(seed)
        self._error_rate = error_rate
        self._lost_reply_rate = lost_reply_rate
        self._lock = threading.Lock()
        self.injected = 0
        # Calls (by method name) that never fail, e.g. to keep a test's checks honest.
        self.exempt: set[str] = {"exists", "list_segments"}

    def _roll(self, op: str, name: str, rate: float) -> None:
        if op in self.exempt or rate <= 0.0:
            return
        with self._lock:
            hit = self._random.random() < rate
            if hit:
                self.injected += 1
        if hit:
            raise InjectedStorageError(name, f"injected transient failure of {op}")

    def _before(self, op: str, name: str) -> None:
        self._roll(op, name, self._error_rate)

    def _after(self, op: str, name: str) -> None:
        self._roll(op, name, self._lost_reply_rate)

    def create(self, name: str) -> SegmentInfo:
        self._before("create", name)
        info = self.inner.create(name)
        self._after("create", name)
        return info

    def exists(self, name: str) -> bool:
        self._before("exists", name)
        return self.inner.exists(name)

    def get_info(self, name: str) -> SegmentInfo:
        self._before("get_info", name)
        return self.inner.get_info(name)

    def write(self, name: str, offset: int, data: WriteData, *, durable: bool = True) -> None:
        self._before("write", name)
        self.inner.write(name, offset, data, durable=durable)
        self._after("write", name)

    def read(self, name: str, offset: int, length: int, read_ahead_max: int | None = None) -> bytes:
        self._before("read", name)
        return self.inner.read(name, offset, length, read_ahead_max)

    def seal(self, name: str) -> None:
        self._before("seal", name)
        self.inner.seal(name)
        self._after("seal", name)

    def concat(self, target: str, target_offset: int, source: str) -> None:
        self._before("concat", target)
        self.inner.concat(target, target_offset, source)
        self._after("concat", target)

    def truncate(self, name: str, offset: int) -> None:
        self._before("truncate", name)
        self.inner.truncate(name, offset)
        self._after("truncate", name)

    def delete(self, name: str) -> None:
        self._before("delete", name)
        self.inner.delete(name)
        self._after("delete", name)

    def list_segments(self) -> Iterator[str]:
        self._before("list_segments", "")
        return self.inner.list_segments()

    def forget_cached(self, belongs: Callable[[str], bool]) -> None:
        self.inner.forget_cached(belongs)
