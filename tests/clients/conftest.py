"""The client tests share ``tests/conftest.py``'s ``tidegate`` fixture."""

import tidegate.protocol  # noqa: F401  (loads kafka-python's schema modules with its warning silenced)
