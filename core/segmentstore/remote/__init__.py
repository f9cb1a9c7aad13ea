"""The segment store over the network: a node serves its local ``SegmentStore`` to the
other nodes (``server.SegmentStoreServer``), which reach segments of containers they do
not own through ``client.RemoteSegmentStore``, the same Protocol over one TCP connection.
The frames are in ``codec``."""
