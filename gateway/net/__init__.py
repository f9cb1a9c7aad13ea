"""The network layer: the asyncio Kafka server, frame reading, the frame pool, the node-wide bound on request bytes."""
