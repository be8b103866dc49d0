"""Simulation targets of the float32 cores: ``fp32_mul``, ``fp32_add``, ``fp32_cmp`` and
``fp32_div`` (K6's ``threshold_acc`` divider).

``dut`` wraps one core between streams (``Float32OpStream``, parameter ``operation``),
``vectors`` makes operand sets and numpy's results, ``tb`` is the cocotb testbench (one test:
the corner pairs, then the random pairs under random idle and back-pressure).
"""

from ..targets import SimTarget

__all__ = ["TARGETS", "BY_OPERATION"]


def _target(operation: str, description: str) -> SimTarget:
    return SimTarget(
        f"fp32_{operation}", description,
        component="sim.float32.dut:Float32OpStream",
        testbench="sim.float32.tb",
        parameters={"operation": operation},
        config={"vectors": 200_000, "idle": 0.25, "backpressure": 0.25},
        phases=("float32_core_matches_numpy",),
        figures_tests=("float32_core_matches_numpy",),
        case_tests=(),
    )


TARGETS = [
    _target("mul", "float32 multiply core vs numpy (corner pairs + random mix)"),
    _target("add", "float32 add/subtract core vs numpy (corner pairs + random mix)"),
    _target("cmp", "float32 compare core vs numpy (corner pairs + random mix)"),
    _target("div", "float32 divide core (K6's threshold_acc divider) vs numpy (corner pairs + "
                   "subnormal ties + random mix)"),
]

#: ``operation`` -> its target.
BY_OPERATION = {target.parameters["operation"]: target for target in TARGETS}
