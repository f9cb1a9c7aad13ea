"""Loads kafka-python's schemas with their deprecation warning silenced (``protocol/__init__.py``)
before the tests here import the gateway's group modules."""

import tidegate.protocol  # noqa: F401
