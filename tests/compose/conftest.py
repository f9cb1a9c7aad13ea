import os

# testcontainers' reaper is an image from a registry, which this machine cannot reach; the
# tests remove their containers and volumes themselves.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
