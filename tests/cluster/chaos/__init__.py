"""The fault campaign (issue 36): a three-node cluster under idempotent, transactional and
consumer-group workloads, seeded random faults, and a checker that reads every partition
back. ``python -m tests.cluster.chaos --seed N --faults K`` (``make chaos``) runs one."""
