"""``ControllerServices``: what the controller's managers (auto-scaling, retention,
transactions, key-value tables, reader groups, watermarks) read through it. Each manager
declares what else it calls in a narrower Protocol of its own module, so none of them
imports ``StreamController``."""

from __future__ import annotations

from typing import Protocol

from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.history import History
from tidegate.core.controller.metadata import MetadataStore, StreamMeta


class ControllerServices(Protocol):
    """The controller's configuration, clock and metadata store, and its streams with
    their epoch histories (``StreamController``)."""

    @property
    def config(self) -> ControllerConfig: ...
    @property
    def md(self) -> MetadataStore: ...

    def now_ms(self) -> int:
        """The controller's wall clock in milliseconds."""

    async def check_scope(self, scope: str) -> None:
        """``ScopeNotFoundError`` unless ``scope`` exists."""

    async def stream_meta(self, scope: str, stream: str) -> StreamMeta:
        """The stream's metadata, or ``ScopeNotFoundError`` / ``StreamNotFoundError``."""

    async def history(self, meta: StreamMeta) -> History:
        """The stream's epoch history."""

    async def streams_with_state(self) -> list[tuple[str, str]]:
        """Every (scope, stream) whose creation finished and which is not being deleted."""
