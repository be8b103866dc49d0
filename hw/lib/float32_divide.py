"""IEEE-754 binary32 division, bit-exact with numpy ``float32`` ``/``.

Same conventions as ``hw.lib.float32``: round to nearest, ties to even, subnormal operands and
results kept (no flush to zero), overflow to infinity, the canonical quiet NaN ``0x7FC00000``
for any NaN operand and for ``0/0`` and ``inf/inf``; ``x/0`` is a signed infinity for ``x != 0``.
Fully pipelined: one division per clock, a fixed :attr:`Float32Divide.latency`, clock enable
``en`` freezing the whole pipeline (``hw.lib.pipeline``).

Datapath (restoring division on the normalised significands):

1. Decode, special cases, the significands' leading-zero counts.
2. Subnormal significands are normalised (the left shift), so both significands ``A, B``
   lie in ``[2^23, 2^24)``; exponent difference.
3. ``X = A`` if ``A >= B`` else ``2A`` (the exponent drops by one), so ``X / B`` is in ``[1, 2)``.
4. 25 quotient bits ``Q`` (24 significand bits and the guard bit) by restoring division,
   ``bits_per_stage`` bits per pipeline stage; the final remainder is the sticky bit.
5. A quotient below the normal range is shifted right into the subnormal position, shifted-out
   bits joining the sticky bit (exact: only guard and sticky decide the rounding).
6. Round to nearest even; the rounding carry ripples into the exponent field (largest
   subnormal to smallest normal, largest finite to infinity).

No ties can occur in the normal range (a midpoint needs 25 significant bits, a quotient of two
24-bit significands times an exact divisor cannot have them), but they do occur for subnormal
results, which the shift-then-round order handles.
"""

import operator

from amaranth.hdl import Cat, Const, Module, Mux, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .float32 import CANONICAL_NAN, POSITIVE_INFINITY, float32_fields
from .pipeline import count_leading_zeros, data_stage, dropped_bits

__all__ = ["Float32Divide", "QUOTIENT_BITS", "divide_latency", "quotient_alignment",
           "ALIGN_MAX_SHIFT"]

#: Quotient bits produced by the restoring iterations: 24 significand bits and the guard bit.
QUOTIENT_BITS = 25


def divide_latency(bits_per_stage: int = 1) -> int:
    """:attr:`Float32Divide.latency` for ``bits_per_stage`` (without building a core)."""
    return 5 + -(-QUOTIENT_BITS // bits_per_stage)


#: The largest right shift ``quotient_alignment`` gives: any shift of 33 or more leaves only the
#: sticky bit of a 25-bit quotient, and 33 fits 6 bits.
ALIGN_MAX_SHIFT = 33


def quotient_alignment(exponent: Value) -> dict:
    """What the rounding of a quotient with biased ``exponent`` (signed) needs, computed ahead
    of the quotient (behind it, the compare, the subtraction and the shift were 9-10 LUT
    levels): ``right``, its right shift (0 for a normal result), ``field``, the exponent
    field (0 for a subnormal one), and ``overflow``."""
    is_normal = exponent >= 1
    return {"right": Mux(is_normal, 0, Mux(exponent < 1 - ALIGN_MAX_SHIFT, ALIGN_MAX_SHIFT,
                                           (1 - exponent)[:6])),
            "field": Mux(is_normal, exponent[:8], 0), "overflow": exponent >= 0xFF}


def _round_to_nearest_even(exponent_field: Value, significand: Value, guard: Value,
                           sticky: Value) -> Value:
    """31-bit magnitude ``{exponent_field, significand[:23]}`` rounded to nearest even (the
    carry of the increment ripples into the exponent field). Same rule as the private helper
    of ``hw.lib.float32``, repeated here so that module stays untouched."""
    truncated = Cat(significand[:23], exponent_field[:8])
    round_up = guard & (sticky | significand[0])
    return (truncated + round_up)[:31]


class Float32Divide(wiring.Component):
    """Pipelined float32 division ``a / b``, bit-exact with numpy ``float32`` division.

    Parameters
    ----------
    bits_per_stage : int
        Quotient bits per pipeline stage (keyword, 1..25, default 1): each bit is one 25-bit
        trial subtraction, chained inside the stage (two already break the 300 MHz rule of
        docs/timing.md). Sets :attr:`latency`.

    Attributes
    ----------
    latency : int
        Clocks from an operand pair to its quotient: ``5 + ceil(25 / bits_per_stage)`` (30 at
        the default).

    Members
    -------
    en : In(1)
        Clock enable of the whole pipeline (init 1).
    a, b : In(32)
        Dividend and divisor (binary32 bit patterns).
    result : Out(32)
        ``a / b`` rounded to nearest even; canonical NaN for NaN operands, ``0/0`` and
        ``inf/inf``.
    """

    def __init__(self, *, bits_per_stage: int = 1):
        try:
            bits_per_stage = operator.index(bits_per_stage)
        except TypeError:
            raise ValueError(f"`bits_per_stage` must be an integer between 1 and "
                             f"{QUOTIENT_BITS}, not {bits_per_stage!r}") from None
        if not 1 <= bits_per_stage <= QUOTIENT_BITS:
            raise ValueError(f"`bits_per_stage` must be between 1 and {QUOTIENT_BITS}, "
                             f"not {bits_per_stage}")
        self._bits_per_stage = bits_per_stage
        super().__init__({
            "en": In(1, init=1),
            "a": In(32),
            "b": In(32),
            "result": Out(32),
        })

    @property
    def bits_per_stage(self) -> int:
        return self._bits_per_stage

    @property
    def iteration_stages(self) -> int:
        """Pipeline stages of the restoring iterations: ``ceil(25 / bits_per_stage)``."""
        return -(-QUOTIENT_BITS // self._bits_per_stage)

    @property
    def latency(self) -> int:
        return divide_latency(self._bits_per_stage)

    def elaborate(self, platform):
        m = Module()
        en = self.en
        a, b = float32_fields(self.a), float32_fields(self.b)

        # Stage 1: the operands' classes, the significands and their leading zeros.
        s1 = {f"{name}_{x}": data_stage(m, en, value, name=f"s1_{name}_{x}")
              for x, fields in (("a", a), ("b", b))
              for name, value in (("mantissa", fields.mantissa),
                                  ("exponent", fields.exponent_eff),
                                  ("zeros", count_leading_zeros(fields.mantissa)),
                                  ("nan", fields.is_nan), ("inf", fields.is_inf),
                                  ("zero", fields.is_zero), ("sign", fields.sign))}

        # Stage 2: the normalised significands and the biased exponent of their quotient (A/B
        # in (1/2, 2)): (ea - lz_a) - (eb - lz_b) + 127, in a signed 11-bit field; specials.
        exponent = ((s1["exponent_a"] - s1["zeros_a"]) - (s1["exponent_b"] - s1["zeros_b"])
                    + 127)
        s2_exponent = data_stage(m, en, exponent.as_signed()[:11].as_signed(), name="s2_exponent")
        s2_a = data_stage(m, en, (s1["mantissa_a"] << s1["zeros_a"])[:24], name="s2_a")
        s2_b = data_stage(m, en, (s1["mantissa_b"] << s1["zeros_b"])[:24], name="s2_b")
        is_nan = (s1["nan_a"] | s1["nan_b"] | (s1["zero_a"] & s1["zero_b"])
                  | (s1["inf_a"] & s1["inf_b"]))
        is_inf = s1["inf_a"] | s1["zero_b"]
        is_zero = s1["zero_a"] | s1["inf_b"]
        sign = s1["sign_a"] ^ s1["sign_b"]
        special_value = Mux(is_nan, CANONICAL_NAN,
                            Cat(Mux(is_inf, POSITIVE_INFINITY, 0)[:31], sign))
        carried = {name: data_stage(m, en, value, name=f"s2_{name}") for name, value in (
            ("special", is_nan | is_inf | is_zero), ("special_value", special_value),
            ("sign", sign))}

        # Stage 3: X/B in [1, 2).
        below = s2_a < s2_b
        s3_remainder = data_stage(m, en,
                                  Mux(below, Cat(Const(0, 1), s2_a), Cat(s2_a, Const(0, 1))),
                                  name="s3_remainder")
        s3_divisor = data_stage(m, en, s2_b, name="s3_divisor")
        s3_exponent = data_stage(m, en, (s2_exponent - below)[:11].as_signed(), name="s3_exponent")
        carried = {name: data_stage(m, en, value, name=f"s3_{name}")
                   for name, value in carried.items()}

        # What post 1 needs of the exponent, from here on beside the iterations.
        carried.update(quotient_alignment(s3_exponent))

        # Iterations: remainder R < 2B (26 bits), one quotient bit per trial subtraction.
        remainder, divisor = s3_remainder, s3_divisor
        quotient = Const(0, 0)
        produced = 0
        for index in range(self.iteration_stages):
            for _ in range(min(self._bits_per_stage, QUOTIENT_BITS - produced)):
                difference = remainder - divisor
                bit = ~difference[-1]  # remainder >= divisor
                kept = Mux(bit, difference[:25], remainder[:25])
                remainder = Cat(Const(0, 1), kept)[:26]
                quotient = Cat(bit, quotient)
                produced += 1
            if index == self.iteration_stages - 1:
                # Post 1's sticky mask, computed into the last stage: a flip-flop, where the
                # delay line of ``right`` ends in a shift register (slow clock-to-out).
                carried["dropped"] = dropped_bits(carried["right"], QUOTIENT_BITS)
            remainder = data_stage(m, en, remainder, name=f"d{index}_remainder")
            quotient = data_stage(m, en, quotient, name=f"d{index}_quotient")
            divisor = data_stage(m, en, divisor, name=f"d{index}_divisor")
            carried = {name: data_stage(m, en, value, name=f"d{index}_{name}")
                       for name, value in carried.items()}

        # Post 1: normal or subnormal alignment, sticky bit.
        # (As ``pipeline.shift_right_sticky`` with ``max_shift=ALIGN_MAX_SHIFT``, its mask ahead.)
        shifted = quotient >> carried.pop("right")
        lost = (quotient & carried.pop("dropped")).any()
        p1_quotient = data_stage(m, en, shifted, name="p1_quotient")
        p1_sticky = data_stage(m, en, remainder.any() | lost, name="p1_sticky")
        carried = {name: data_stage(m, en, value, name=f"p1_{name}")
                   for name, value in carried.items()}
        p1_exponent_field, p1_overflow = carried["field"], carried["overflow"]

        # Post 2: round.
        magnitude = _round_to_nearest_even(p1_exponent_field, p1_quotient[1:25],
                                           guard=p1_quotient[0], sticky=p1_sticky)
        magnitude = Mux(p1_overflow, POSITIVE_INFINITY, magnitude)
        m.d.comb += self.result.eq(data_stage(
            m, en, Mux(carried["special"], carried["special_value"],
                       Cat(magnitude[:31], carried["sign"])),
            name="p2_result"))
        return m
