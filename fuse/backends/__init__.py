"""Backend plugins."""
