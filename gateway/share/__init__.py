"""Share groups (KIP-932, queues for Kafka): ``coordinator`` (members, assignments,
share sessions), ``partition`` (each share-partition's in-flight records and locks),
``store`` (their durable state in a table segment), ``reading`` (what ShareFetch and
ShareAcknowledge share). See docs/share-groups.md."""
