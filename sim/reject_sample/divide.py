"""The ``fp32_div`` target: ``hw.lib.float32_divide.Float32Divide`` between streams, and its
operand sets (``sim.float32``'s corner and random mixes plus division-specific ones).

``divide_operands`` adds to ``sim.float32.vectors.random_operands``: subnormal quotients with
exact rounding ties (small integers times ``2^-149`` over small integers and powers of two),
quotients near the overflow and underflow thresholds, and the K6 operating range
(``prob_acc`` in ``[0, 2]`` over ``max(threshold_acc, 1e-9)`` in ``[1e-9, 1]``).
"""

import numpy as np
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.float32_divide import Float32Divide, divide_latency
from hw.lib.stream import stalling_handshake
from sim.float32.vectors import random_operands

__all__ = ["Float32DivideStream", "OPERAND_LAYOUT", "RESULT_LAYOUT", "divide_operands",
           "quotients"]

OPERAND_LAYOUT = data.StructLayout({"a": 32, "b": 32})
RESULT_LAYOUT = data.StructLayout({"result": 32})


class Float32DivideStream(wiring.Component):
    """``Float32Divide`` between an operand stream ``i`` ``{a, b}`` and a result stream ``o``
    ``{result}`` (``a / b``, in operand order).

    Parameters
    ----------
    bits_per_stage : int
        Passed to ``Float32Divide``.
    """

    def __init__(self, *, bits_per_stage: int = 2):
        self._bits_per_stage = bits_per_stage
        self._latency = divide_latency(bits_per_stage)
        super().__init__({
            "i": In(stream.Signature(OPERAND_LAYOUT)),
            "o": Out(stream.Signature(RESULT_LAYOUT)),
        })

    @property
    def latency(self):
        return self._latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = Float32Divide(bits_per_stage=self._bits_per_stage)
        m.d.comb += [
            core.en.eq(stalling_handshake(m, latency=core.latency, source=self.i, sink=self.o)),
            core.a.eq(self.i.payload.a),
            core.b.eq(self.i.payload.b),
            self.o.payload.result.eq(core.result),
        ]
        return m


def _scaled(integers, exponents):
    return (integers.astype(np.float64) * np.exp2(exponents.astype(np.float64))) \
        .astype(np.float32).view(np.uint32)


def divide_operands(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` operand pairs (uint32 bit patterns) for the divider (see module docs)."""
    quarter = n // 4
    a_mix, b_mix = random_operands(rng, n - 3 * quarter)
    # Subnormal quotients: (k * 2^(s - 149)) / (m * 2^e); the first half are exact ties
    # (k odd, divisor 2^(s + 1): k/2 units of 2^-149), the second half small-integer ratios.
    half = quarter // 2
    k = rng.integers(1, 1 << 12, quarter) | np.r_[np.ones(half, np.int64),
                                                  np.zeros(quarter - half, np.int64)]
    s = rng.integers(0, 30, quarter)
    mm = np.r_[np.ones(half, np.int64), rng.choice([1, 2, 3, 4, 5, 8, 16, 1 << 10],
                                                    quarter - half)]
    e = np.r_[s[:half] + 1, rng.integers(0, 40, quarter - half)]
    a_tie = _scaled(k, s - 149)
    b_tie = _scaled(mm, e)
    # Near overflow / underflow: exponents chosen so that the quotient's lands near the edges.
    ea = rng.integers(1, 255, quarter).astype(np.uint32)
    target = rng.choice([-150, -149, -127, -126, -125, 126, 127, 128], quarter)
    eb = np.clip(ea.astype(np.int64) - target, 1, 254).astype(np.uint32)
    fraction = rng.integers(0, 1 << 23, (2, quarter), dtype=np.uint64).astype(np.uint32)
    sign = rng.integers(0, 2, (2, quarter), dtype=np.uint64).astype(np.uint32) << np.uint32(31)
    a_edge = sign[0] | (ea << np.uint32(23)) | fraction[0]
    b_edge = sign[1] | (eb << np.uint32(23)) | fraction[1]
    # K6: prob_acc / max(threshold_acc, 1e-9).
    p = (rng.random(quarter) * 2).astype(np.float32)
    p[rng.random(quarter) < 0.1] = 0.0
    t = np.exp2(rng.uniform(-29.9, 0, quarter)).astype(np.float32)
    t[rng.random(quarter) < 0.1] = np.float32(1e-9)
    a = np.concatenate([a_mix, a_tie, a_edge, p.view(np.uint32)])
    b = np.concatenate([b_mix, b_tie, b_edge, t.view(np.uint32)])
    order = rng.permutation(n)
    return a[order].astype(np.uint32), b[order].astype(np.uint32)


def quotients(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's float32 ``a / b`` as bit patterns."""
    with np.errstate(all="ignore"):
        return (a.view(np.float32) / b.view(np.float32)).view(np.uint32)
