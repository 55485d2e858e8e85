"""gpt-models."""
