"""Admin operations interrupted after their intent was stored are finished by the next
gateway start (issue 22, finding 6): a CreatePartitions whose split never ran, a
DeleteTopics that stopped after its mark or after the stream's deletion."""

from __future__ import annotations

from dataclasses import replace

from tidegate.core.controller.api import StreamNotFoundError

from tests.gateway.conftest import Node


async def test_interrupted_split_is_finished_at_start(node: Node) -> None:
    gw = node.gateway
    assert gw is not None and gw.ctx is not None
    info = await gw.ctx.topics.create("grow", 4)
    assert info is not None
    # What a kill -9 right after CreatePartitions stored its intent leaves behind.
    await gw.ctx.topics.update(replace(info, partitions=16, splitting_from=4))
    assert len(await node.controller.get_current_segments("kafka", "grow")) == 4
    await node.restart_gateway()
    gw = node.gateway
    assert gw is not None and gw.ctx is not None
    assert len(await node.controller.get_current_segments("kafka", "grow")) == 16
    after = gw.ctx.topics.get("grow")
    assert after is not None and after.partitions == 16 and after.splitting_from is None


async def test_interrupted_deletions_are_finished_at_start(node: Node) -> None:
    gw = node.gateway
    assert gw is not None and gw.ctx is not None
    for name in ("marked", "streamless"):
        info = await gw.ctx.topics.create(name, 3)
        assert info is not None
        await gw.ctx.topics.update(replace(info, deleting=True))
    # "streamless": the crash came after the stream's deletion, before the topic went.
    await node.controller.seal_stream("kafka", "streamless")
    await node.controller.delete_stream("kafka", "streamless")
    assert gw.ctx.topics.get("marked") is None  # no longer listed nor served meanwhile
    await node.restart_gateway()
    gw = node.gateway
    assert gw is not None and gw.ctx is not None
    assert gw.ctx.topics.names() == [] and gw.ctx.topics.unfinished() == []
    for name in ("marked", "streamless"):
        try:
            await node.controller.get_stream("kafka", name)
        except StreamNotFoundError:
            continue
        raise AssertionError(f"the stream of {name} outlived its deletion")
