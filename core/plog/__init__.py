"""Plog servers: replicated Tier-1 storage (the Plog seed). ``wire`` is the TCP
protocol, ``store`` keeps plogs on one server's disk, ``server`` serves them."""
