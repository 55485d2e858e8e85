"""paramspec-sharding."""
