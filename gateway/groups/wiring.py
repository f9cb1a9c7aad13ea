"""How the gateway holds its group coordinator: one instance per node, kept in
``HandlerContext.extensions[EXTENSION_KEY]``, started after the gateway's topics are
loaded and closed before the segment store.

The topic-deletion path calls ``coordinator_of(ctx).remove_topic_offsets([topic])``
once the topic is gone, so commits for deleted topics do not linger.
"""

from __future__ import annotations

from typing import Any

from tidegate.gateway.groups.coordinator import GroupCoordinator

EXTENSION_KEY = "groups"


def coordinator_of(ctx: Any) -> GroupCoordinator:
    coord = ctx.extensions.get(EXTENSION_KEY)
    if coord is None:
        raise RuntimeError("the group coordinator is not wired into this gateway")
    assert isinstance(coord, GroupCoordinator)
    return coord


def client_host(peer: str) -> str:
    """Kafka reports a member's host as ``/address`` (Java's InetAddress.toString)."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return "/" + host.strip("[]")
