"""Admin APIs beside Kafka: the REST service (``rest/``), the controller gRPC service, the node's metrics."""
