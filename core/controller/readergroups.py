"""Reader-group configurations and their subscriptions (consumption-based retention).

The scope's index entry ``rg/<name>`` holds ``{"id", "generation", "config", "state",
"unsubscribe"}``. A reader group whose retention is not ``NONE`` subscribes to each of its
streams: the stream's table holds ``subscriber/<rg scope>/<rg name>`` ->
``{"generation", "cut"}``, starting at the group's start cut (or the stream's head), and
the group reports its position with ``update_subscriber_cut``; retention never
truncates a stream past any subscriber's cut (``policies/retention.py``).

The entry is written first and the subscriptions are brought in line with it afterwards
(``reconcile``, idempotent); ``unsubscribe`` lists streams whose subscription is still to
be removed. ``start()`` reconciles every reader group, so a crash in between leaves
nothing inconsistent for longer than a restart.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Protocol

from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    ReaderGroupConfig,
    ReaderGroupExistsError,
    ReaderGroupInfo,
    ReaderGroupNotFoundError,
    ReaderGroupRetention,
    StreamCut,
    StreamNotFoundError,
)
from tidegate.core.controller.history import head_cut
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.controller.records import Json, cut_from_json, cut_to_json
from tidegate.core.controller.services import ControllerServices
from tidegate.core.controller.validation import check_name
from tidegate.core.segmentstore.api import NOT_EXISTS, SegmentNotFoundError

ACTIVE, DELETING = "ACTIVE", "DELETING"


def config_to_json(c: ReaderGroupConfig) -> Json:
    return {
        "streams": {k: None if v is None else cut_to_json(v) for k, v in sorted(c.streams.items())},
        "retention": c.retention.value,
        "refresh": c.group_refresh_time_ms,
        "checkpoint": c.automatic_checkpoint_interval_ms,
    }


def config_from_json(d: Json) -> ReaderGroupConfig:
    return ReaderGroupConfig(
        streams={k: None if v is None else cut_from_json(v) for k, v in d["streams"].items()},
        retention=ReaderGroupRetention(d["retention"]),
        group_refresh_time_ms=d["refresh"],
        automatic_checkpoint_interval_ms=d["checkpoint"],
    )


def split_stream(qualified: str) -> tuple[str, str]:
    scope, sep, stream = qualified.partition("/")
    if not sep or not scope or not stream:
        raise InvalidArgumentError(f"reader group stream {qualified!r} is not scope/stream")
    return scope, stream


class ReaderGroupsHost(ControllerServices, Protocol):
    """What reader groups use besides the controller's services: its scope lock (not
    racing a scope's deletion) and the random source of their ids."""

    @property
    def scope_lock(self) -> asyncio.Lock: ...
    @property
    def rng(self) -> random.Random: ...


class ReaderGroups:
    def __init__(self, ctl: ReaderGroupsHost) -> None:
        self.ctl = ctl

    async def _check_config(self, c: ReaderGroupConfig) -> None:
        if not isinstance(c, ReaderGroupConfig) or not isinstance(
            c.retention, ReaderGroupRetention
        ):
            raise InvalidArgumentError("reader group configuration expected")
        if not c.streams:
            raise InvalidArgumentError("a reader group reads at least one stream")
        for field, v in (
            ("group_refresh_time_ms", c.group_refresh_time_ms),
            ("automatic_checkpoint_interval_ms", c.automatic_checkpoint_interval_ms),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidArgumentError(f"{field} must be an integer >= 0")
        for qualified, cut in c.streams.items():
            scope, stream = split_stream(qualified)
            if cut is not None:
                h = await self.ctl.history(await self.ctl.stream_meta(scope, stream))
                h.check_cut(cut)
            else:
                await self.ctl.stream_meta(scope, stream)

    async def _entry(self, scope: str, name: str) -> tuple[Json, int]:
        await self.ctl.check_scope(scope)
        v = await self.ctl.md.get(self.ctl.md.scope_table(scope), f"rg/{name}")
        if v is None or v.value["state"] != ACTIVE:
            raise ReaderGroupNotFoundError(f"reader group {scope}/{name} not found")
        return v.value, v.version

    def _info(self, scope: str, name: str, e: Json) -> ReaderGroupInfo:
        return ReaderGroupInfo(scope, name, e["id"], e["generation"], config_from_json(e["config"]))

    async def create(self, scope: str, name: str, config: ReaderGroupConfig) -> ReaderGroupInfo:
        check_name("reader group", name, self.ctl.config)
        await self._check_config(config)
        md = self.ctl.md
        rg_id = uuid.UUID(int=self.ctl.rng.getrandbits(128), version=4).hex
        entry = {
            "id": rg_id,
            "generation": 0,
            "config": config_to_json(config),
            "state": ACTIVE,
            "unsubscribe": [],
        }
        async with self.ctl.scope_lock:
            await self.ctl.check_scope(scope)
            try:
                await md.put(
                    md.scope_table(scope), {f"rg/{name}": entry}, {f"rg/{name}": NOT_EXISTS}
                )
            except ConflictError as e:
                raise ReaderGroupExistsError(f"reader group {scope}/{name} exists") from e
        await self.reconcile(scope, name)
        return self._info(scope, name, entry)

    async def get(self, scope: str, name: str) -> ReaderGroupInfo:
        e, _ = await self._entry(scope, name)
        return self._info(scope, name, e)

    async def list(self, scope: str) -> list[str]:
        await self.ctl.check_scope(scope)
        return [
            k[len("rg/") :]
            for k, v in await self.ctl.md.entries(self.ctl.md.scope_table(scope), "rg/")
            if v.value["state"] == ACTIVE
        ]

    async def update(self, scope: str, name: str, config: ReaderGroupConfig) -> ReaderGroupInfo:
        """Replace the configuration and raise the generation; subscriptions follow."""
        await self._check_config(config)
        e, version = await self._entry(scope, name)
        old = config_from_json(e["config"])
        gone = (
            set(old.streams) - set(config.streams)
            if config.retention != ReaderGroupRetention.NONE
            else set(old.streams)
        )
        new = {
            **e,
            "generation": e["generation"] + 1,
            "config": config_to_json(config),
            "unsubscribe": sorted(set(e["unsubscribe"]) | gone),
        }
        await self.ctl.md.put(
            self.ctl.md.scope_table(scope), {f"rg/{name}": new}, {f"rg/{name}": version}
        )
        await self.reconcile(scope, name)
        return self._info(scope, name, new)

    async def delete(self, scope: str, name: str) -> None:
        e, version = await self._entry(scope, name)
        new = {
            **e,
            "state": DELETING,
            "unsubscribe": sorted(set(e["unsubscribe"]) | set(e["config"]["streams"])),
        }
        await self.ctl.md.put(
            self.ctl.md.scope_table(scope), {f"rg/{name}": new}, {f"rg/{name}": version}
        )
        await self.reconcile(scope, name)

    async def reconcile(self, scope: str, name: str) -> None:
        """Bring the streams' subscriber entries in line with the reader group's entry."""
        md = self.ctl.md
        table = md.scope_table(scope)
        v = await md.get(table, f"rg/{name}")
        if v is None:
            return
        e = v.value
        key = f"subscriber/{scope}/{name}"
        for qualified in e["unsubscribe"]:
            s_scope, s_stream = split_stream(qualified)
            try:
                await md.remove(md.stream_table(s_scope, s_stream), [key])
            except SegmentNotFoundError:
                pass  # the stream is gone
        if e["state"] == DELETING:
            await md.remove(table, [f"rg/{name}"])
            return
        config = config_from_json(e["config"])
        if config.retention != ReaderGroupRetention.NONE:
            for qualified, start in config.streams.items():
                s_scope, s_stream = split_stream(qualified)
                try:
                    meta = await self.ctl.stream_meta(s_scope, s_stream)
                except StreamNotFoundError:
                    continue
                sub = await meta.get(key)
                if sub is None:
                    trunc = await meta.truncation()
                    cut = start or head_cut(
                        await self.ctl.history(meta), trunc.cut if trunc else None
                    )
                    await meta.put(
                        {key: {"generation": e["generation"], "cut": cut_to_json(cut)}},
                        {key: NOT_EXISTS},
                    )
                elif sub.value["generation"] != e["generation"]:
                    await meta.put(
                        {key: {**sub.value, "generation": e["generation"]}}, {key: sub.version}
                    )
        if e["unsubscribe"]:
            await md.put(table, {f"rg/{name}": {**e, "unsubscribe": []}}, {f"rg/{name}": v.version})

    async def update_subscriber_cut(
        self, scope: str, stream: str, rg_scope: str, rg: str, generation: int, cut: StreamCut
    ) -> None:
        """Record how far reader group ``rg_scope/rg`` has consumed ``scope/stream``.
        ``ConflictError`` for a stale generation or a cut behind the previous one."""
        meta: StreamMeta = await self.ctl.stream_meta(scope, stream)
        key = f"subscriber/{rg_scope}/{rg}"
        sub = await meta.get(key)
        if sub is None:
            raise ReaderGroupNotFoundError(
                f"reader group {rg_scope}/{rg} does not subscribe to {meta.name}"
            )
        if generation != sub.value["generation"]:
            raise ConflictError(
                f"generation {generation} is not the reader group's {sub.value['generation']}"
            )
        h = await self.ctl.history(meta)
        h.check_cut(cut)
        if not h.cut_ge(cut, cut_from_json(sub.value["cut"])):
            raise ConflictError("subscriber StreamCut is behind the previous one")
        await meta.put({key: {**sub.value, "cut": cut_to_json(cut)}}, {key: sub.version})

    async def subscribers(self, scope: str, stream: str) -> dict[str, dict[int, int]]:
        """``"rg scope/rg name"`` -> its last reported StreamCut."""
        meta = await self.ctl.stream_meta(scope, stream)
        return {
            k[len("subscriber/") :]: cut_from_json(v.value["cut"])
            for k, v in await self.ctl.md.entries(meta.table, "subscriber/")
        }

    async def resume(self) -> None:
        md = self.ctl.md
        for scope, _ in await md.entries(md.scopes_table):
            for k, _ in await md.entries(md.scope_table(scope), "rg/"):
                await self.reconcile(scope, k[len("rg/") :])
