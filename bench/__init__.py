"""Benchmarks that need more than the project's own toolchain (``bench.gpu``: the GPU baseline).

Nothing in ``make test``'s tier imports this package; its tests are in the ``slow`` tier and
skip when the optional ``gpu`` dependency group (torch, triton) is not installed.
"""
