"""Gloo backend."""
