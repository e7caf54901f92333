"""Backends: sibling modules exposing the same few functions (start, liveness, cancel)."""
