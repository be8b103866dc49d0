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

from typing import NamedTuple

from amaranth.hdl import Array, Cat, Const, Module, Mux, Value, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .pipeline import data_stage

__all__ = [
    "CANONICAL_NAN", "POSITIVE_INFINITY",
    "Float32Fields", "float32_fields", "float32_order_key", "float32_less", "float32_less_equal",
    "float32_equal",
    "Float32Compare", "Float32Multiply", "Float32Add",
]

CANONICAL_NAN = 0x7FC0_0000
POSITIVE_INFINITY = 0x7F80_0000


class Float32Fields(NamedTuple):
    """A binary32 bit pattern's fields and classes (:func:`float32_fields`): ``sign``,
    ``exponent`` (raw 8 bits), ``fraction`` (23 bits), ``magnitude`` (the low 31 bits: orders
    non-NaN magnitudes as an unsigned integer), ``exponent_eff`` (the exponent with subnormals
    read as 1), ``mantissa`` (24 bits with the hidden bit), ``is_zero``, ``is_inf``,
    ``is_nan``."""

    sign: Value
    exponent: Value
    fraction: Value
    magnitude: Value
    exponent_eff: Value
    mantissa: Value
    is_zero: Value
    is_inf: Value
    is_nan: Value


def float32_fields(bits: Value) -> Float32Fields:
    """Decode a binary32 bit pattern into its fields and classes (combinational)."""
    bits = Value.cast(bits)
    sign, exponent, fraction = bits[31], bits[23:31], bits[:23]
    exponent_is_zero = exponent == 0
    exponent_is_max = exponent == 0xFF
    return Float32Fields(
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


def _order_terms(a: Value, b: Value):
    """What the compares of ``a`` and ``b`` need, each one magnitude compare deep (a carry
    chain): neither is NaN (a magnitude above infinity's), both are zeros."""
    ma, mb = a[:31], b[:31]
    neither_nan = (ma <= POSITIVE_INFINITY) & (mb <= POSITIVE_INFINITY)
    return neither_nan, (ma == 0) & (mb == 0)


def float32_less(a: Value, b: Value) -> Value:
    """``a < b`` as IEEE-754 (and numpy) define it: false whenever either side is NaN.

    Compares sign and magnitude directly (magnitude compares side by side, no negation in
    front of a compare as with ``float32_order_key``, NaN tests as compares with infinity's
    magnitude: fewer logic levels)."""
    a, b = Value.cast(a), Value.cast(b)
    neither_nan, both_zero = _order_terms(a, b)
    ma, mb = a[:31], b[:31]
    less = Mux(a[31], Mux(b[31], mb < ma, ~both_zero), Mux(b[31], 0, ma < mb))
    return neither_nan & less


def float32_less_equal(a: Value, b: Value) -> Value:
    """``a <= b`` as IEEE-754 defines it (false whenever either side is NaN), one magnitude
    compare deep, where ``float32_less | float32_equal`` ORs a 31-bit equality behind it (7 LUT
    levels from a register in ``work_deltas``)."""
    a, b = Value.cast(a), Value.cast(b)
    neither_nan, both_zero = _order_terms(a, b)
    ma, mb = a[:31], b[:31]
    at_most = Mux(a[31], Mux(b[31], mb <= ma, 1), Mux(b[31], both_zero, ma <= mb))
    return neither_nan & at_most


def float32_equal(a: Value, b: Value) -> Value:
    """``a == b`` as IEEE-754 defines it: ``+0.0 == -0.0``, NaN equals nothing."""
    a, b = Value.cast(a), Value.cast(b)
    fa, fb = float32_fields(a), float32_fields(b)
    return ~(fa.is_nan | fb.is_nan) & ((a == b) | (fa.is_zero & fb.is_zero))


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


_GROUP_BITS = 6  # leading-zero counts in groups of 6 bits: one LUT per output bit


def _leading_zero_groups(value: Value, offset: int = 0, sign: int = 1) -> Value:
    """First half of ``offset + sign * z``, ``z`` the leading zeros of ``value`` (at most 31
    bits): per group of 6 bits from the top (the last may be shorter), whether it holds a
    one and the result if the first one is in it (a table lookup: no adder), as one value
    for a register (7 bits a group)."""
    fields = []
    for top in range(len(value), 0, -_GROUP_BITS):
        bottom = max(top - _GROUP_BITS, 0)
        above = len(value) - top  # zeros above the group
        table = Array(Const(offset + sign * (above + top - bottom - v.bit_length()), signed(6))
                      for v in range(1 << (top - bottom)))
        fields += [table[value[bottom:top]][:6], value[bottom:top].any()]
    return Cat(*fields)


def _leading_zeros_from_groups(groups: Value, width: int, offset: int = 0,
                               sign: int = 1) -> Value:
    """Second half: ``offset + sign * z`` (a signed 6-bit value) for a ``width``-bit value
    from its groups' summary, a priority selection (no adder); zero has ``z = width``."""
    result = Const(offset + sign * width, signed(6))
    for k in reversed(range(len(groups) // 7)):  # the first group with a one wins
        result = Mux(groups[7 * k + 6], groups[7 * k:7 * k + 6].as_signed(), result)
    return result


class Float32Multiply(wiring.Component):
    """Pipelined float32 multiply, bit-exact with numpy ``float32`` multiplication.

    Stages: (1) decode (the operands' classes), exponent sum, the significands' leading
    zeros; (2) the special cases, the 24x24-bit significand product as two DSP slices'
    partial products and, beside them, the exponent arithmetic; (3) their sum; (4) the
    normalisation amounts for both possible positions of the product's leading one, and that
    position (one bit of the product); (5) the position picks one set, and the
    normalisation shift: left to bit 47, or right into the subnormal range (its lost bits
    known from stage 4); (6) round to nearest even.
    Every stage fits the 300 MHz rule of docs/timing.md (the leading-zero count of the
    product, its exponent arithmetic and both shifts were once one stage of 20 LUT levels).

    Attributes
    ----------
    latency : int
        Clocks from an operand pair to its product: 6.

    Members
    -------
    en : In(1)
        Clock enable of the whole pipeline (init 1).
    a, b : In(32)
        Operands (binary32 bit patterns).
    result : Out(32)
        ``a * b``, rounded to nearest even; canonical NaN for NaN operands and ``inf * 0``.
    """

    latency = 6

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

        # Stage 1: the operands' classes (special operands resolve the result on their own,
        # in stage 2: decoding and combining them in one stage took 7-8 LUT levels behind a
        # kernel's operand multiplexer). A significand with ``z`` leading zeros (of 24) has
        # its leading one at bit 23 - z, so the product of two nonzero ones has it at bit
        # 47 - lz or 46 - lz, lz = z_a + z_b.
        s1 = {name: data_stage(m, en, value, name=f"s1_{name}") for name, value in {
            "sign": a.sign ^ b.sign,
            **{f"{kind}_{name}": getattr(x, kind) for name, x in (("a", a), ("b", b))
               for kind in ("is_nan", "is_inf", "is_zero")},
            "exponent_sum": a.exponent_eff + b.exponent_eff,
            "mantissa_a": a.mantissa, "mantissa_b": b.mantissa,
            **{f"zeros_{name}": _leading_zero_groups(x.mantissa) for name, x in (("a", a),
                                                                                ("b", b))},
            # e - z for a subnormal operand (e = 1)
            **{f"rest_{name}": _leading_zero_groups(x.mantissa, 1, -1) for name, x in (("a", a),
                                                                                   ("b", b))},
            "subnormal_a": a.exponent == 0, "subnormal_b": b.exponent == 0,
            "exponent_a": a.exponent, "exponent_b": b.exponent,
        }.items()}

        # Stage 2: the partial products of the significands and beside them the exponent
        # arithmetic that does not depend on the product (its sums in stage 3); the special
        # cases.
        is_nan = (s1["is_nan_a"] | s1["is_nan_b"] | (s1["is_inf_a"] & s1["is_zero_b"])
                  | (s1["is_inf_b"] & s1["is_zero_a"]))
        is_inf = s1["is_inf_a"] | s1["is_inf_b"]
        lz = (_leading_zeros_from_groups(s1["zeros_a"], 24).as_unsigned()
              + _leading_zeros_from_groups(s1["zeros_b"], 24).as_unsigned())  # 0 .. 48
        reduced = [Mux(s1[f"subnormal_{x}"],
                       _leading_zeros_from_groups(s1[f"rest_{x}"], 24, 1, -1),
                       s1[f"exponent_{x}"]) for x in "ab"]  # e - z
        s2 = {name: data_stage(m, en, value, name=f"s2_{name}") for name, value in {
            # two 24 x 17 / 24 x 7 partial products, one DSP slice each
            "low": s1["mantissa_a"] * s1["mantissa_b"][:17],
            "high": s1["mantissa_a"] * s1["mantissa_b"][17:],
            "lz": lz[:6], "reduced_a": reduced[0], "reduced_b": reduced[1],
            "special_value": Mux(is_nan, CANONICAL_NAN,
                                 Cat(Mux(is_inf, POSITIVE_INFINITY, 0)[:31], s1["sign"])),
            "special": is_nan | is_inf | s1["is_zero_a"] | s1["is_zero_b"],
            **{name: s1[name] for name in ("exponent_sum", "sign")}}.items()}

        # Stage 3: the product P, value P * 2^(ea + eb - 254 - 46) (the two slices' sum: the
        # cascade adder of the second slice in a vendor mapping).
        # Beside it, what a subnormal result needs: P shifts right by 127 - (ea + eb) (63:
        # all 48 bits) and drops its bits i < 127 - (ea + eb).
        exponent_sum = s2["exponent_sum"]
        s3 = {name: data_stage(m, en, value, name=f"s3_{name}") for name, value in {
            "product": s2["low"] + (s2["high"] << 17),
            "subnormal_right": Mux(exponent_sum >= 127, 0,
                                   Mux(exponent_sum < 64, 63, (127 - exponent_sum)[:6])),
            "dropped": Cat(*(exponent_sum < 127 - i for i in range(48))),
            "lz_plus_1": (s2["lz"] + 1)[:6],
            "distance": s2["reduced_a"] + s2["reduced_b"],  # ea + eb - lz
            **{name: value for name, value in s2.items()
               if name not in ("low", "high", "reduced_a", "reduced_b")}
        }.items()}

        # Stage 4: for t = 0, 1 (P's leading one at bit 47 - lz - t) what the textbook
        # normalisation does: the biased exponent ea + eb - 126 - lz - t, normal when >= 1
        # (then P moves left by lz + t), else aligned to exponent 1 by a total left shift of
        # ea + eb - 127 (a right shift with sticky bit when negative; 63 stands for any
        # shift of all 48 bits). Bit 47 - lz of P says which t holds.
        exponent_sum = s3["exponent_sum"]
        subnormal_left = Mux(exponent_sum > 127, (exponent_sum - 127)[:6], 0)
        choices = []
        for t in (0, 1):
            exponent = s3["distance"] - 126 - t
            is_normal = s3["distance"] >= 127 + t  # exponent >= 1, without the subtraction
            choices.append({
                "left": Mux(is_normal, s3["lz_plus_1"] if t else s3["lz"], subnormal_left),
                "subnormal": ~is_normal,
                "field": Mux(is_normal, exponent[:8], 0),
                # (ea + eb >= 381 needs two normal operands: lz = 0)
                "overflow": exponent_sum >= 381 + t,
            })
        # Both choices are registered with t (bit 47 - lz of P, a 64-way multiplexer); stage 5
        # picks one (choosing here too makes the stage too deep for the rule). The two left
        # shifts differ by one bit at most: by one when both choices are normal (lz + 1 and
        # lz), else not at all (both subnormal_left, or lz = subnormal_left at distance 127).
        s4 = {name: data_stage(m, en, value, name=f"s4_{name}") for name, value in {
            "t": ~Array([*s3["product"][:48][::-1], *[Const(0, 1)] * 16])[s3["lz"]],
            "left": choices[0]["left"], "one_more": ~choices[1]["subnormal"],
            **{f"{name}{t}": choice[name] for t, choice in enumerate(choices)
               for name in ("subnormal", "field", "overflow")},
            "below": exponent_sum < 127,
            "right_shifted": s3["product"] >> s3["subnormal_right"],
            "dropped_ones": (s3["product"] & s3["dropped"]).any(),
            **{name: s3[name] for name in ("product", "sign", "special", "special_value")}
        }.items()}

        # Stage 5: the shift, by the choice-0 amount and one more bit beside it (whether a
        # right shift drops a one is known from stage 4).
        chosen = {name: Mux(s4["t"], s4[f"{name}1"], s4[f"{name}0"])
                  for name in ("subnormal", "field", "overflow")}
        shifted = (s4["product"] << s4["left"])[:48]
        shifted = Mux(s4["t"] & s4["one_more"], Cat(Const(0, 1), shifted[:47]), shifted)
        s5 = {name: data_stage(m, en, value, name=f"s5_{name}") for name, value in {
            "significand": Mux(chosen["subnormal"] & s4["below"], s4["right_shifted"], shifted),
            "lost": chosen["subnormal"] & s4["dropped_ones"],
            "field": chosen["field"], "overflow": chosen["overflow"],
            **{name: s4[name] for name in ("sign", "special", "special_value")}}.items()}

        # Stage 6: bits 24..47 are the significand, bit 23 the guard bit, the rest sticky.
        significand = s5["significand"]
        magnitude = _round_to_nearest_even(
            s5["field"], significand[24:48], guard=significand[23],
            sticky=significand[:23].any() | s5["lost"])
        magnitude = Mux(s5["overflow"], POSITIVE_INFINITY, magnitude)
        m.d.comb += self.result.eq(data_stage(
            m, en, Mux(s5["special"], s5["special_value"], Cat(magnitude[:31], s5["sign"])),
            name="s6_result"))
        return m


class Float32Add(wiring.Component):
    """Pipelined float32 add/subtract, bit-exact with numpy ``float32`` ``+`` and ``-``.

    Uses the textbook guard/round/sticky datapath: the smaller operand is aligned into a
    27-bit field (24 significand bits and 3 extra bits, the last one sticky), which is enough
    for a correctly rounded sum and difference. Stages: (1) decode, order by magnitude,
    special cases; (2) alignment shift, the sticky bit (a one of the smaller significand
    below the shift distance, from a mask of the distance), and a marker bit at the lowest
    position a normalisation shift may bring the leading one to (exponent 1, subnormal);
    (3) add or subtract, and the leading-zero group tables of the sum with the marker; (4)
    their priority selection (the left shift, never below exponent 1); (5) normalisation
    shift and the result exponent; (6) round to nearest even. An exact zero sum is ``+0.0``
    unless both addends are negative zeros. Every stage meets the 300 MHz rule of
    docs/timing.md (with latency 5, the normalisation stage had 13 LUT levels).

    Attributes
    ----------
    latency : int
        Clocks from an operand pair to its sum: 6.

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

    latency = 6

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

        # Stage 1: the operands' classes, and the operands ordered so that |big| >= |small|.
        swap = b.magnitude > a.magnitude
        big_sign = Mux(swap, b.sign, a.sign)
        big_exponent = Mux(swap, b.exponent_eff, a.exponent_eff)
        small_exponent = Mux(swap, a.exponent_eff, b.exponent_eff)
        s1 = {f"{name}_{x}": data_stage(m, en, getattr(fields, name), name=f"s1_{name}_{x}")
              for x, fields in (("a", a), ("b", b)) for name in ("is_nan", "is_inf", "sign")}
        s1_sign = data_stage(m, en, big_sign, name="s1_sign")
        s1_zero_sign = data_stage(m, en, a.sign & b.sign, name="s1_zero_sign")
        s1_subtract = data_stage(m, en, a.sign != b.sign, name="s1_subtract")
        s1_exponent = data_stage(m, en, big_exponent, name="s1_exponent")
        s1_distance = data_stage(m, en, (big_exponent - small_exponent)[:8], name="s1_distance")
        s1_big = data_stage(m, en, Mux(swap, b.mantissa, a.mantissa), name="s1_big")
        s1_small = data_stage(m, en, Mux(swap, a.mantissa, b.mantissa), name="s1_small")

        # Stage 2: the special cases; align the smaller significand, a one shifted out (a
        # one below bit `distance` of the field: the field under a mask of the distance, a
        # few LUT levels beside the shifter, where a trailing-zero count in stage 1 took six
        # and seven in some kernels) sets the sticky bit; for a difference, stage 3 takes the
        # one's complement and adds the one. The marker: bit 27 - exponent, the position a
        # left shift by `exponent - 1` brings to bit 26.
        is_nan = s1["is_nan_a"] | s1["is_nan_b"] | (
            s1["is_inf_a"] & s1["is_inf_b"] & (s1["sign_a"] != s1["sign_b"]))
        is_inf = s1["is_inf_a"] | s1["is_inf_b"]
        inf_sign = Mux(s1["is_inf_a"], s1["sign_a"], s1["sign_b"])
        field = Cat(Const(0, 3), s1_small)
        aligned = Mux(s1_distance[5:].any(), 0, field >> s1_distance[:5])
        # (ORed per group of 6 bits here; the groups join bit 0 in stage 3, in the LUTs in
        # front of the adder's carry)
        shifted_out = [field[x] & (s1_distance > x) for x in range(3, 27)]
        s2_sticky = data_stage(m, en, Cat(Cat(shifted_out[x:x + 6]).any()
                                     for x in range(0, len(shifted_out), 6)), name="s2_sticky")
        s2_small = data_stage(m, en, Cat(aligned[:27], 0), name="s2_small")
        s2_big = data_stage(m, en, Cat(Const(0, 3), s1_big), name="s2_big")
        s2_subtract = data_stage(m, en, s1_subtract, name="s2_subtract")
        s2_marker = data_stage(m, en, Cat(s1_exponent == 27 - i for i in range(27)),
                               name="s2_marker")
        s2_special = data_stage(m, en, is_nan | is_inf, name="s2_special")
        s2_is_nan = data_stage(m, en, is_nan, name="s2_is_nan")
        s2_inf_sign = data_stage(m, en, inf_sign, name="s2_inf_sign")
        pass_through = [(s2_special, "special"), (s2_is_nan, "is_nan"), (s2_inf_sign, "inf_sign"),
                        (data_stage(m, en, s1_sign, name="s2_sign"), "sign"),
                        (data_stage(m, en, s1_zero_sign, name="s2_zero_sign"), "zero_sign"),
                        (data_stage(m, en, s1_exponent, name="s2_exponent"), "exponent")]
        s2 = {name: value for value, name in pass_through}

        # Stage 3: |big| >= |small|, so the difference is never negative. The leading-zero
        # group tables of the sum with the marker: the count is then at most `exponent - 1`.
        small = Cat(s2_small[0] | s2_sticky.any(), s2_small[1:]) ^ s2_subtract.replicate(28)
        total = (s2_big + small + s2_subtract)[:28]
        s3_sum = data_stage(m, en, total, name="s3_sum")
        s3_groups = data_stage(m, en, _leading_zero_groups(total[:27] | s2_marker),
                               name="s3_groups")
        s3 = {name: data_stage(m, en, s2[name], name=f"s3_{name}") for _, name in pass_through}

        # Stage 4: the left shift, min(leading zeros, exponent - 1).
        s4 = {name: data_stage(m, en, value, name=f"s4_{name}") for name, value in {
            "sum": s3_sum, "is_zero": s3_sum == 0,
            "left_amount": _leading_zeros_from_groups(s3_groups, 27).as_unsigned()[:5],
            **{name: s3[name] for _, name in pass_through}}.items()}

        # Stage 5: normalise (a carry out shifts right by one instead, its lost bit stays
        # sticky) and the exponent after it; a subnormal result (or a zero sum) leaves bit 26
        # clear and gets the exponent field 0.
        total = s4["sum"]
        carry = total[27]
        normalised = Mux(carry, Cat(total[0] | total[1], total[2:28]),
                         (total[:27] << s4["left_amount"])[:27])
        exponent = Mux(carry, s4["exponent"] + 1, s4["exponent"] - s4["left_amount"])[:9]
        s5_significand = data_stage(m, en, normalised, name="s5_significand")
        s5_exponent_field = data_stage(m, en, Mux(normalised[26], exponent, 0)[:9],
                                       name="s5_exponent_field")
        s5_is_zero = data_stage(m, en, s4["is_zero"], name="s5_is_zero")
        s5 = {name: data_stage(m, en, s4[name], name=f"s5_{name}") for _, name in pass_through
              if name != "exponent"}

        # Stage 6: round; only a carry out of exponent 254 overflows before rounding.
        magnitude = _round_to_nearest_even(
            s5_exponent_field, s5_significand[3:27], guard=s5_significand[2],
            sticky=s5_significand[:2].any())
        magnitude = Mux(s5_exponent_field >= 0xFF, POSITIVE_INFINITY, magnitude)
        sign = Mux(s5_is_zero, s5["zero_sign"], s5["sign"])
        special_value = Mux(s5["is_nan"], CANONICAL_NAN,
                            Cat(Const(POSITIVE_INFINITY, 31), s5["inf_sign"]))
        m.d.comb += self.result.eq(data_stage(
            m, en, Mux(s5["special"], special_value, Cat(magnitude[:31], sign)),
            name="s6_result"))
        return m

