"""The read index and the cache."""
