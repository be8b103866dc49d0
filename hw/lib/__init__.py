"""Shared hardware primitives: float32 cores, pipeline helpers, stream framing."""
