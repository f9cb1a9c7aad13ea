"""Kafka over streams: topics and their configs, partition logs (the produce path below the handler), the offset index, log starts, idempotent producers."""
