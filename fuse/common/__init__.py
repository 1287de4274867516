"""Shared pieces the framework adapters use."""
