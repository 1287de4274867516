"""Framework adapter plugins."""
