"""IEEE-754 binary32 arithmetic, bit-exact with numpy ``float32``.

Every core rounds to nearest, ties to even, keeps subnormal inputs and outputs (no flush to
zero, CUDA's default) and overflows to infinity as IEEE-754 says. Any NaN operand, and the
invalid operations ``inf * 0`` and ``inf - inf``, give the canonical quiet NaN ``0x7FC00000``;
NaN payloads are not propagated (numpy's are platform-dependent, CUDA's is ``0x7FFFFFFF``), so
tests compare NaN results by class, everything else by bit pattern.

The arithmetic cores are fully pipelined: one operation per clock, a fixed ``latency`` (class
constant) between an operand pair and its result, and a clock enable ``en`` that freezes the
whole pipeline (see ``hw.lib.pipeline``).
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .pipeline import count_leading_zeros, shift_right_sticky, stage

__all__ = [
    "CANONICAL_NAN", "POSITIVE_INFINITY",
    "float32_fields", "float32_order_key", "float32_less", "float32_equal",
    "Float32Compare", "Float32Multiply", "Float32Add",
]

CANONICAL_NAN = 0x7FC0_0000
POSITIVE_INFINITY = 0x7F80_0000


def float32_fields(bits: Value) -> SimpleNamespace:
    """Decode a binary32 bit pattern into its fields and classes (combinational).

    Members of the result: ``sign``, ``exponent`` (raw 8 bits), ``fraction`` (23 bits),
    ``magnitude`` (the low 31 bits: orders non-NaN magnitudes as an unsigned integer),
    ``exponent_eff`` (the exponent with subnormals read as 1), ``mantissa`` (24 bits with the
    hidden bit), ``is_zero``, ``is_inf``, ``is_nan``.
    """
    bits = Value.cast(bits)
    sign, exponent, fraction = bits[31], bits[23:31], bits[:23]
    exponent_is_zero = exponent == 0
    exponent_is_max = exponent == 0xFF
    return SimpleNamespace(
        sign=sign,
        exponent=exponent,
        fraction=fraction,
        magnitude=bits[:31],
        exponent_eff=Mux(exponent_is_zero, 1, exponent),
        mantissa=Cat(fraction, ~exponent_is_zero),
        is_zero=exponent_is_zero & (fraction == 0),
        is_inf=exponent_is_max & (fraction == 0),
        is_nan=exponent_is_max & (fraction != 0),
    )


def float32_order_key(bits: Value) -> Value:
    """A signed 32-bit integer ordering non-NaN binary32 values numerically.

    ``+0.0`` and ``-0.0`` map to the same key, so they compare equal, as IEEE-754 says.
    """
    bits = Value.cast(bits)
    magnitude = bits[:31]
    return Mux(bits[31], -magnitude, magnitude)


def float32_less(a: Value, b: Value) -> Value:
    """``a < b`` as IEEE-754 (and numpy) define it: false whenever either side is NaN."""
    unordered = float32_fields(a).is_nan | float32_fields(b).is_nan
    return ~unordered & (float32_order_key(a) < float32_order_key(b))


def float32_equal(a: Value, b: Value) -> Value:
    """``a == b`` as IEEE-754 defines it: ``+0.0 == -0.0``, NaN equals nothing."""
    unordered = float32_fields(a).is_nan | float32_fields(b).is_nan
    return ~unordered & (float32_order_key(a) == float32_order_key(b))


class Float32Compare(wiring.Component):
    """Registered float32 comparison, one pair per clock.

    Attributes
    ----------
    latency : int
        Clocks from an operand pair to its flags: 1.

    Members
    -------
    en : In(1)
        Clock enable (init 1).
    a, b : In(32)
        Operands (binary32 bit patterns).
    lt, eq, gt : Out(1)
        ``a < b``, ``a == b``, ``a > b`` with IEEE-754 semantics: all three low when either
        operand is NaN.
    """

    latency = 1

    def __init__(self):
        super().__init__({
            "en": In(1, init=1),
            "a": In(32),
            "b": In(32),
            "lt": Out(1),
            "eq": Out(1),
            "gt": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += [
                self.lt.eq(float32_less(self.a, self.b)),
                self.eq.eq(float32_equal(self.a, self.b)),
                self.gt.eq(float32_less(self.b, self.a)),
            ]
        return m


def _round_to_nearest_even(exponent_field: Value, significand: Value, guard: Value,
                           sticky: Value) -> Value:
    """31-bit magnitude ``{exponent_field, significand[:23]}`` rounded to nearest even.

    ``significand`` holds the hidden bit at index 23 (ignored here: the exponent field says
    whether the value is normal). The carry of the rounding increment ripples into the exponent
    field, which turns the largest subnormal into the smallest normal and the largest finite
    value into infinity, exactly as IEEE-754 requires.
    """
    truncated = Cat(significand[:23], exponent_field[:8])
    round_up = guard & (sticky | significand[0])
    return (truncated + round_up)[:31]


class Float32Multiply(wiring.Component):
    """Pipelined float32 multiply, bit-exact with numpy ``float32`` multiplication.

    Stages: (1) decode, special cases, exponent sum; (2) 24x24-bit significand product (maps
    to DSP slices); (3) normalisation: leading-zero count and shift, or the right shift into
    the subnormal range; (4) round to nearest even.

    Attributes
    ----------
    latency : int
        Clocks from an operand pair to its product: 4.

    Members
    -------
    en : In(1)
        Clock enable of the whole pipeline (init 1).
    a, b : In(32)
        Operands (binary32 bit patterns).
    result : Out(32)
        ``a * b``, rounded to nearest even; canonical NaN for NaN operands and ``inf * 0``.
    """

    latency = 4

    def __init__(self):
        super().__init__({
            "en": In(1, init=1),
            "a": In(32),
            "b": In(32),
            "result": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        en = self.en
        a, b = float32_fields(self.a), float32_fields(self.b)

        # Stage 1: special operands resolve the result on their own.
        is_nan = a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (b.is_inf & a.is_zero)
        is_inf = a.is_inf | b.is_inf
        sign = a.sign ^ b.sign
        special_value = Mux(is_nan, CANONICAL_NAN,
                            Cat(Mux(is_inf, POSITIVE_INFINITY, 0)[:31], sign))
        s1_sign = stage(m, en, sign, name="s1_sign")
        s1_special = stage(m, en, is_nan | is_inf | a.is_zero | b.is_zero, name="s1_special")
        s1_special_value = stage(m, en, special_value, name="s1_special_value")
        s1_exponent_sum = stage(m, en, a.exponent_eff + b.exponent_eff, name="s1_exponent_sum")
        s1_mantissa_a = stage(m, en, a.mantissa, name="s1_mantissa_a")
        s1_mantissa_b = stage(m, en, b.mantissa, name="s1_mantissa_b")

        # Stage 2: the product of two 24-bit significands, value P * 2^(ea + eb - 254 - 46).
        s2_product = stage(m, en, s1_mantissa_a * s1_mantissa_b, name="s2_product")
        s2_sign = stage(m, en, s1_sign, name="s2_sign")
        s2_special = stage(m, en, s1_special, name="s2_special")
        s2_special_value = stage(m, en, s1_special_value, name="s2_special_value")
        s2_exponent_sum = stage(m, en, s1_exponent_sum, name="s2_exponent_sum")

        # Stage 3: move the leading one to bit 47. Then the biased exponent is
        # ea + eb - 126 - lz. Below 1 the result is subnormal: it is then aligned to exponent 1,
        # a total left shift of ea + eb - 127, which is a right shift when that is negative.
        leading_zeros = count_leading_zeros(s2_product)
        normal_exponent = s2_exponent_sum - 126 - leading_zeros
        is_normal = normal_exponent >= 1
        subnormal_left = s2_exponent_sum - 127
        left_amount = Mux(is_normal, leading_zeros,
                          Mux(subnormal_left > 0, subnormal_left[:6], 0))
        right_amount = Mux(is_normal | (subnormal_left >= 0), 0, (-subnormal_left)[:8])
        shifted, lost = shift_right_sticky((s2_product << left_amount)[:48], right_amount,
                                           max_shift=48)
        s3_significand = stage(m, en, shifted, name="s3_significand")
        s3_lost = stage(m, en, lost, name="s3_lost")
        s3_exponent_field = stage(m, en, Mux(is_normal, normal_exponent[:8], 0),
                                  name="s3_exponent_field")
        s3_overflow = stage(m, en, is_normal & (normal_exponent >= 0xFF), name="s3_overflow")
        s3_sign = stage(m, en, s2_sign, name="s3_sign")
        s3_special = stage(m, en, s2_special, name="s3_special")
        s3_special_value = stage(m, en, s2_special_value, name="s3_special_value")

        # Stage 4: bits 24..47 are the significand, bit 23 the guard bit, the rest sticky.
        magnitude = _round_to_nearest_even(
            s3_exponent_field, s3_significand[24:48], guard=s3_significand[23],
            sticky=s3_significand[:23].any() | s3_lost)
        magnitude = Mux(s3_overflow, POSITIVE_INFINITY, magnitude)
        m.d.comb += self.result.eq(stage(
            m, en, Mux(s3_special, s3_special_value, Cat(magnitude[:31], s3_sign)),
            name="s4_result"))
        return m


class Float32Add(wiring.Component):
    """Pipelined float32 add/subtract, bit-exact with numpy ``float32`` ``+`` and ``-``.

    Uses the textbook guard/round/sticky datapath: the smaller operand is aligned into a
    27-bit field (24 significand bits and 3 extra bits, the last one sticky), which is enough
    for a correctly rounded sum and difference. Stages: (1) decode, order by magnitude,
    special cases; (2) alignment shift; (3) add or subtract; (4) normalisation by leading-zero
    count, limited at the subnormal exponent; (5) round to nearest even. An exact zero sum is
    ``+0.0`` unless both addends are negative zeros.

    Attributes
    ----------
    latency : int
        Clocks from an operand pair to its sum: 5.

    Members
    -------
    en : In(1)
        Clock enable of the whole pipeline (init 1).
    a, b : In(32)
        Operands (binary32 bit patterns).
    subtract : In(1)
        When high the core computes ``a - b`` (exactly ``a + (-b)``), else ``a + b``.
    result : Out(32)
        The rounded sum; canonical NaN for NaN operands and ``inf - inf``.
    """

    latency = 5

    def __init__(self):
        super().__init__({
            "en": In(1, init=1),
            "a": In(32),
            "b": In(32),
            "subtract": In(1),
            "result": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        en = self.en
        a = float32_fields(self.a)
        b = float32_fields(Cat(self.b[:31], self.b[31] ^ self.subtract))

        # Stage 1: specials, and the operands ordered so that |big| >= |small|.
        is_nan = a.is_nan | b.is_nan | (a.is_inf & b.is_inf & (a.sign != b.sign))
        is_inf = a.is_inf | b.is_inf
        inf_sign = Mux(a.is_inf, a.sign, b.sign)
        special_value = Mux(is_nan, CANONICAL_NAN, Cat(Const(POSITIVE_INFINITY, 31), inf_sign))
        swap = b.magnitude > a.magnitude
        big_sign = Mux(swap, b.sign, a.sign)
        big_exponent = Mux(swap, b.exponent_eff, a.exponent_eff)
        small_exponent = Mux(swap, a.exponent_eff, b.exponent_eff)
        s1_special = stage(m, en, is_nan | is_inf, name="s1_special")
        s1_special_value = stage(m, en, special_value, name="s1_special_value")
        s1_sign = stage(m, en, big_sign, name="s1_sign")
        s1_zero_sign = stage(m, en, a.sign & b.sign, name="s1_zero_sign")
        s1_subtract = stage(m, en, a.sign != b.sign, name="s1_subtract")
        s1_exponent = stage(m, en, big_exponent, name="s1_exponent")
        s1_distance = stage(m, en, (big_exponent - small_exponent)[:8], name="s1_distance")
        s1_big = stage(m, en, Mux(swap, b.mantissa, a.mantissa), name="s1_big")
        s1_small = stage(m, en, Mux(swap, a.mantissa, b.mantissa), name="s1_small")

        # Stage 2: align the smaller significand; bits shifted out fold into the sticky bit.
        aligned, lost = shift_right_sticky(Cat(Const(0, 3), s1_small), s1_distance, max_shift=27)
        s2_small = stage(m, en, Cat(aligned[0] | lost, aligned[1:]), name="s2_small")
        s2_big = stage(m, en, Cat(Const(0, 3), s1_big), name="s2_big")
        s2_subtract = stage(m, en, s1_subtract, name="s2_subtract")
        pass_through = [(s1_special, "special"), (s1_special_value, "special_value"),
                        (s1_sign, "sign"), (s1_zero_sign, "zero_sign"), (s1_exponent, "exponent")]
        s2 = {name: stage(m, en, value, name=f"s2_{name}") for value, name in pass_through}

        # Stage 3: |big| >= |small|, so the difference is never negative.
        total = Mux(s2_subtract, s2_big - s2_small, s2_big + s2_small)[:28]
        s3_sum = stage(m, en, total, name="s3_sum")
        s3 = {name: stage(m, en, s2[name], name=f"s3_{name}") for _, name in pass_through}

        # Stage 4: normalise. A carry out shifts right by one (its lost bit stays sticky);
        # otherwise shift left by the leading zeros, but never below exponent 1 (subnormal).
        carry = s3_sum[27]
        leading_zeros = count_leading_zeros(s3_sum[:27])
        left_limit = (s3["exponent"] - 1)[:8]
        left_amount = Mux(leading_zeros < left_limit, leading_zeros, left_limit)
        normalised = Mux(carry, Cat(s3_sum[0] | s3_sum[1], s3_sum[2:28]),
                         (s3_sum[:27] << left_amount)[:27])
        exponent = Mux(carry, s3["exponent"] + 1, s3["exponent"] - left_amount)[:9]
        s4_significand = stage(m, en, normalised, name="s4_significand")
        s4_exponent_field = stage(m, en, Mux(normalised[26], exponent, 0)[:9],
                                  name="s4_exponent_field")
        s4_is_zero = stage(m, en, s3_sum == 0, name="s4_is_zero")
        s4 = {name: stage(m, en, s3[name], name=f"s4_{name}") for _, name in pass_through
              if name != "exponent"}

        # Stage 5: round; only a carry out of exponent 254 overflows before rounding.
        magnitude = _round_to_nearest_even(
            s4_exponent_field, s4_significand[3:27], guard=s4_significand[2],
            sticky=s4_significand[:2].any())
        magnitude = Mux(s4_exponent_field >= 0xFF, POSITIVE_INFINITY, magnitude)
        sign = Mux(s4_is_zero, s4["zero_sign"], s4["sign"])
        m.d.comb += self.result.eq(stage(
            m, en, Mux(s4["special"], s4["special_value"], Cat(magnitude[:31], sign)),
            name="s5_result"))
        return m

