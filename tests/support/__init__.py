"""Helpers for integration and fault tests: spawned processes, polling with deadlines."""
