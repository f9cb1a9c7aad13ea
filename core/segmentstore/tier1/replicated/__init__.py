"""The replicated Tier-1 log: a ``DurableDataLog`` over plog servers (the Plog seed)."""
