"""Background policies the controller enforces: auto-scaling and retention."""
