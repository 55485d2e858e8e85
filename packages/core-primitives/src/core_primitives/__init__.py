"""core-primitives."""
