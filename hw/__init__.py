"""Amaranth hardware: shared primitives (``hw.lib``), one component per kernel (``hw.kernels``)."""
