"""Cluster mode: membership, the controller leader and the container map in ZooKeeper
(``zookeeper``, the one module that imports kazoo, also used by the replicated Tier-1),
the balanced sticky container assignment (``assignment``), the routing segment store
(``routing``) and the node that ties them together (``node``)."""
