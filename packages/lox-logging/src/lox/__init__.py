"""lox-logging."""
