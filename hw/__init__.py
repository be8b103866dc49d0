"""Amaranth hardware: shared primitives (``hw.lib``) and one component per kernel (``hw.kernels``)."""
