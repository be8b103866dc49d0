"""The persistent engine as a Vitis RTL kernel, for ``python -m hw.build --kernel dataflow``.

The kernel is ``hw.dataflow.vitis_top.EngineKernel`` (``PersistentEngine``, its command and
completion rings, the AXI4-Lite control registers and the m_axi ports with Vitis names); its
default parameter set is the small ``KERNEL_PARAMETERS`` (docs/vitis.md, "The engine's
kernel"). The build writes its Vitis packaging too (``EngineKernel.vitis_interface``).
"""

from dataclasses import asdict

from hw.dataflow.engine import EngineParams
from hw.dataflow.vitis_top import EngineKernel, kernel_parameters

__all__ = ["synthesis_parameters", "synthesis_configuration", "V80_PARAMETERS",
           "SYNTH_FRONTEND"]

#: ``python -m hw.synth`` reads the engine as RTLIL (``flow.synth.synthesize``'s ``frontend``).
SYNTH_FRONTEND = "rtlil"

#: ``python -m hw.synth --v80 dataflow``: the default engine build (``EngineParams``' defaults:
#: 128 slots, K = W = 8, MAXV 64, MAXN 1,024) with the fused verify of ``python -m hw.synth
#: tree_verify`` (two 256-bit ports, 16 lanes). The V80 build's verify has 1,024 lanes; the
#: estimate adds them by the lane's measured share (docs/tree_verify.md, "The lane").
V80_PARAMETERS = {**asdict(EngineParams()), "logit_ports": 2, "logit_port_bits": 256,
                  "max_vocab_size": 32768}


def synthesis_parameters(**overrides) -> EngineParams:
    """``hw.dataflow.vitis_top.KERNEL_PARAMETERS`` with ``overrides``."""
    return kernel_parameters(**overrides)


def synthesis_configuration(**overrides) -> EngineKernel:
    return EngineKernel(**asdict(synthesis_parameters(**overrides)))
