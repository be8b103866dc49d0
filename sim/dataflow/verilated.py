"""The engine's in-process Verilator models (``sim.verilated``), one per parameter set: the
rtl and card backends of ``host`` and the cycle budget's measurement (``sim.dataflow.measure``)
share them."""

from pathlib import Path

__all__ = ["verilated_library"]


def verilated_library(top: str, parameters: tuple, log=print) -> Path:
    """The shared library of the engine's ``top`` for ``parameters`` (``(name, value)`` pairs
    of ``EngineParams``): ``"engine"`` (``PersistentEngine``) or ``"kernel"`` (its Vitis
    kernel ``EngineKernel``). Once per process from memory, else from ``sim.verilated``'s
    index (keyed by the parameters and the ``hw/`` sources), else elaborated and built
    (cached by its Verilog)."""
    if (top, parameters) not in _LIBRARIES:
        from hw.dataflow.engine import PersistentEngine
        from hw.dataflow.vitis_top import EngineKernel
        from sim.harness import REPO_ROOT
        from sim.verilated import build_indexed

        component, name, key = {
            "engine": (PersistentEngine, "top", repr(parameters)),
            "kernel": (EngineKernel, "dataflow", f"EngineKernel{parameters!r}")}[top]
        _LIBRARIES[top, parameters] = build_indexed(
            lambda: component(**dict(parameters)), key=key,
            sources=(REPO_ROOT / "hw").glob("**/*.py"), name=name, log=log)
    return _LIBRARIES[top, parameters]


_LIBRARIES: dict = {}
