"""The durable log: operation queue, data frames, Tier-1 writes, in-order commit."""
