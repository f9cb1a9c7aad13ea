"""Kafka wire protocol: framing, the API registry types, error codes and the record
batch header view. Bytes in, bytes out; no sockets, no asyncio.

kafka-python 3.0.12 builds its message classes from JSON schemas read with
``importlib.resources.read_text``, deprecated since Python 3.11; every schema module is
imported here once with that warning silenced, so later imports (ours, and the clients'
in tests run with warnings as errors) find them loaded.
"""

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin
    import kafka.protocol.api_header
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl  # noqa: F401
