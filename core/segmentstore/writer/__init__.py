"""The storage writer: moves durable operations to Tier-2."""
