"""Helpers for testing gnnbridge and its plugins: the backend conformance suite, rank workers."""
