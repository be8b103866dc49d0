"""Simulation targets of the float32 cores: ``fp32_mul``, ``fp32_add``, ``fp32_cmp``.

``dut`` wraps one core between streams, ``vectors`` makes operand sets and numpy's results,
``tb`` is the cocotb testbench.
"""

from ..targets import SimTarget


def _target(operation: str, description: str) -> SimTarget:
    def make_dut():
        from .dut import Float32OpStream

        return Float32OpStream(operation)

    return SimTarget(
        name=f"fp32_{operation}",
        description=description,
        make_dut=make_dut,
        testbench="sim.float32.tb",
        config={"operation": operation, "vectors": 200_000, "idle": 0.25, "backpressure": 0.25},
    )


TARGETS = [
    _target("mul", "float32 multiply core vs numpy (corner pairs + random mix)"),
    _target("add", "float32 add/subtract core vs numpy (corner pairs + random mix)"),
    _target("cmp", "float32 compare core vs numpy (corner pairs + random mix)"),
]
