"""Message schemas kafka-python 3.0.12 lacks, in Kafka's own JSON message-spec format
(the ``clients/src/main/resources/common/message`` files), loaded by kafka-python's
schema machinery (``ApiMessage`` with ``load_json=`` this package) so these APIs use
the same codec as every other one. The classes are in ``protocol/consumer_group.py``."""
