"""Alveo board records and vendor build scripts (filled by the board build-flow work)."""
