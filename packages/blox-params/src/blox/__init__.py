"""blox-params."""
