"""Simulation target of the engine's packaged Vitis kernel
(``hw.dataflow.vitis_top.EngineKernel``): ``dataflow_kernel`` (`make sim
KERNEL=dataflow_kernel`).

The kernel's Verilog at its default build (``KERNEL_PARAMETERS``: 256-bit m_axi ports with
64-bit addresses and one ID bit, the small engine) under an independent AXI model:
cocotbext-axi's ``AxiLiteMaster`` on ``s_axi_control`` and one cocotbext-axi RAM per m_axi
port, all over one memory, with random pause generators on every channel. ``tb`` runs rounds
of ``sim.dataflow.rounds.Scenario`` through the rings as a card's host would and checks every
completion, memory effect and port counter against ``golden.engine``.
"""

from hw.dataflow.vitis_top import KERNEL_PARAMETERS

from ..targets import SimTarget

__all__ = ["TARGET", "TARGETS"]

TARGET = SimTarget(
    "dataflow_kernel",
    "the engine's Vitis kernel (rings, control registers, counter window, m_axi ports) under "
    "cocotbext-axi (AxiLiteMaster, a RAM per port, random pauses) vs golden.engine",
    component="hw.dataflow.vitis_top:EngineKernel",
    parameters=KERNEL_PARAMETERS,
    config={
        "rounds": 10,  # rounds of Scenario (with bad commands between them)
        "pause": 0.3,  # probability of a paused channel per clock, every m_axi channel
        "bad_commands": 0.2,
        "vocab_size": 32,
        "context_len": 48,
        "memory_bytes": 1 << 18,  # one RAM behind every port, at BASE
    },
    phases=("rounds",),
    figures_tests=("rounds",),
    case_tests=(),
)

TARGETS = [TARGET]
