"""examples layer."""
