"""What the group handlers share besides ``HandlerContext.groups`` (the node's one
group coordinator, started after the gateway's topics are loaded and closed before the
segment store; the topic-deletion path calls its ``remove_topic_offsets([topic])`` once
the topic is gone, so commits for deleted topics do not linger)."""

from __future__ import annotations


def client_host(peer: str) -> str:
    """Kafka reports a member's host as ``/address`` (Java's InetAddress.toString)."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return "/" + host.strip("[]")
