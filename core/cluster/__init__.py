"""Cluster coordination. ``zookeeper`` is the one module that talks to ZooKeeper."""
