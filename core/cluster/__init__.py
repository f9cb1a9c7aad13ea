"""Cluster mode: membership, the controller leader and the container map in ZooKeeper
(``zookeeper``, the one module that imports kazoo), the balanced sticky container
assignment (``assignment``), the routing segment store (``routing``) and the node that
ties them together (``node``)."""
