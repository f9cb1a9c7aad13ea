"""tidegate: a Kafka-wire-compatible gateway over elastic, tiered streams.

The product's folders install as the subpackages ``tidegate.gateway``,
``tidegate.core``, ``tidegate.protocol`` and ``tidegate.tier2`` (``setup.py`` maps
them), so nothing of ours lands in site-packages under a name of its own.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tidegate")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
