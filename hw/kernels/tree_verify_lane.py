"""One lane of the fused verify (docs/tree_verify.md): a logit to its fixed-point exponential,
rank and normaliser term, bit-exact with ``golden.logit_rows.lane_exponentials`` and
``normaliser_terms``.

The lane takes one logit per clock while ``en`` is high and answers ``LATENCY`` enabled clocks
later; the row's constants (``golden.logit_rows.RowConstants``) are static while its logits
are in flight. The fused verify instantiates ``lanes`` of them (``hw.kernels.tree_verify_row``
sums a bank word's terms in one adder tree) and one more for single tokens.
"""

from amaranth.hdl import Cat, Const, Module, Mux, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.logit_rows import (
    ALIGN_BITS,
    EXP_TABLE,
    LN2_Q18,
    MANTISSA_BITS,
    RANGE_BITS,
    SCALE_BITS,
    TABLE_BITS,
    TERM_BITS,
    Y_FRACTION_BITS,
)
from hw.lib.float32 import float32_fields
from hw.lib.pipeline import data_stage, stage

__all__ = ["LogitLane", "LaneShare", "counted_term", "SUM_BITS", "GRID_BITS", "KEY_BITS",
           "KEY_TOP", "align_magnitude", "synthesis_configuration"]

GRID_BITS = 10  # signed width of the grid exponent L
SUM_BITS = TERM_BITS + 1 + 24  # a row's sum: terms just over 2**48, up to 2**24 of them
KEY_BITS = RANGE_BITS + 2  # keys lie in (2**33, 2**34] in range, 0 out of range
KEY_TOP = 1 << 34  # key = KEY_TOP - z: key >= f exactly when z <= KEY_TOP - f


def _at_least(x_sign, greater_or_equal, equal, t):
    """``x >= t`` of float32 values (``x`` not NaN; false when ``t`` is NaN) from the sign of
    ``x`` and the comparison of the magnitudes (``|x| >= |t|``, ``|x| == |t|``, computed a stage
    earlier), without order keys; ``t`` is decoded."""
    same_sign = Mux(x_sign, ~greater_or_equal | equal, greater_or_equal)
    other_sign = ~x_sign | (equal & t.is_zero)  # equal to a zero: both zeros
    return ~t.is_nan & Mux(x_sign == t.sign, same_sign, other_sign)


def align_magnitude(mantissa, amount):
    """``trunc(mantissa * 2**amount) mod 2**40`` for a 24-bit ``mantissa`` and a signed
    ``amount``: one left shift by ``amount + 24`` (0..63) into a 64-bit field whose top 40 bits
    are the result; amounts outside ``-24..39`` give 0."""
    offset = (amount + 24)[:6]
    shifted = (mantissa << offset)[24:24 + ALIGN_BITS]
    return Mux((amount < -24) | (amount >= ALIGN_BITS), 0, shifted)[:ALIGN_BITS]


class LogitLane(wiring.Component):
    """A logit's exponential ``E * 2**(-31 - k)`` and term ``floor(e * 2**48)``; ``LATENCY``
    clocks.

    Members
    -------
    en : In(1)
        Clock enable: every register advances when high.
    peak, threshold : In(32)
        The row's maximum and coarse threshold (float32 bit patterns; the peak is not NaN).
    grid : In(signed(10))
        ``L``.
    peak_aligned : In(40)
        ``trunc(peak / 2**L) mod 2**40``.
    scale : In(26)
        ``C``.
    logit : In(32)
        A float32 logit (NaN read as ``-inf``).
    valid : In(1)
        Whether ``logit`` belongs to the row (a word's lanes past ``V`` do not).
    in_range : Out(1)
        Whether the token has an exponential (else ``e = 0``, and ``mantissa``, ``shift``,
        ``term`` and ``z`` mean nothing), ``LATENCY`` enabled clocks after ``logit``.
    mantissa : Out(32)
        ``E``.
    shift : Out(8)
        ``k`` (up to 128).
    term : Out(49)
        ``floor(e * 2**48)``.
    z : Out(33)
        ``z = -y * 2**26``: the token's rank key is ``KEY_TOP - z``
        (``golden.logit_rows.RowDistribution.key``).
    out_valid : Out(1)
        ``valid``, delayed like the results.
    """

    LATENCY = 8

    def __init__(self):
        super().__init__({
            "en": In(1), "peak": In(32), "threshold": In(32), "grid": In(signed(GRID_BITS)),
            "peak_aligned": In(ALIGN_BITS), "scale": In(SCALE_BITS), "logit": In(32),
            "valid": In(1),
            "mantissa": Out(32), "shift": Out(8), "term": Out(TERM_BITS + 1),
            "z": Out(RANGE_BITS), "in_range": Out(1), "out_valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        en = self.en

        # 1. Classify and measure the alignment shift. A finite logit equal to the peak gets
        #    D = 0 from the arithmetic; only infinite ones need the comparison. A NaN counts
        #    as -inf: it equals a -inf peak and is otherwise out of range (no substitution in
        #    front of the compare).
        #    The coarse check x >= threshold compares the magnitudes here and the signs in
        #    stage 2 (the threshold is static).
        fields, peak = float32_fields(self.logit), float32_fields(self.peak)
        threshold = float32_fields(self.threshold)
        equal = peak.is_inf & ((fields.is_inf & (fields.sign == peak.sign))
                               | (fields.is_nan & peak.sign))
        finite = ~fields.is_inf & ~fields.is_nan & ~peak.is_inf
        amount = fields.exponent_eff - 150 - self.grid  # signed
        s1 = _stages(m, en, 1, {
            "mantissa": fields.mantissa, "sign": fields.sign, "amount": amount, "equal": equal,
            "at_least": fields.magnitude >= threshold.magnitude,
            "same": fields.magnitude == threshold.magnitude, "finite": finite,
            "valid": self.valid})

        # 2. |x| / 2**L, truncated, modulo 2**40.
        keep = s1["finite"] & _at_least(s1["sign"], s1["at_least"], s1["same"], threshold)
        s2 = _stages(m, en, 2, {
            "aligned": align_magnitude(s1["mantissa"], s1["amount"]), "sign": s1["sign"],
            "equal": s1["equal"], "keep": keep, "valid": s1["valid"]})

        # 3. |D| = peak - x on the grid (no wrap-around once the coarse check passed; one adder
        #    for both signs of x). A maximum equal to the logit gives 0 by itself: an infinite
        #    maximum has peak_aligned 0 and an infinite logit aligns to 0.
        flip = Cat(*([~s2["sign"]] * ALIGN_BITS))  # A - a = A + ~a + 1 for a positive x
        distance = (self.peak_aligned + (s2["aligned"] ^ flip) + ~s2["sign"])[:ALIGN_BITS]
        s3 = _stages(m, en, 3, {
            "distance": distance, "equal": s2["equal"], "keep": s2["keep"],
            "valid": s2["valid"]})

        # 4. The range check |D| <= 2**33; -y = (|D| * C) >> 26, as two 17 x 26 products (one
        #    DSP each; out of range they mean nothing); the integer part k, the fraction
        #    rounded to a table point i and the signed rest.
        distance = s3["distance"]
        near = (distance[RANGE_BITS:] == 0) | (distance == 1 << RANGE_BITS)
        half = (RANGE_BITS + 2) // 2
        low_product = data_stage(m, en, distance[:half] * self.scale, name="s4_low")
        high_product = data_stage(m, en, distance[half:RANGE_BITS + 1] * self.scale, name="s4_high")
        s4 = _stages(m, en, 4, {
            "in_range": s3["equal"] | (s3["keep"] & near), "valid": s3["valid"]})
        z = (low_product + (high_product << half)) >> Y_FRACTION_BITS
        fraction = z[:Y_FRACTION_BITS]
        low_bits = Y_FRACTION_BITS - TABLE_BITS
        round_up = fraction[low_bits - 1]
        index = fraction[low_bits:] + round_up  # 0 .. 1024
        rest = Cat(fraction[:low_bits], round_up).as_signed()  # fraction - index * 2**16
        table = Memory(shape=unsigned(MANTISSA_BITS + 1), depth=1 << TABLE_BITS,
                       init=[int(v) for v in EXP_TABLE])
        m.submodules.table = table
        read = table.read_port()
        m.d.comb += [read.en.eq(en), read.addr.eq(index[:TABLE_BITS])]
        a = (rest * LN2_Q18) >> 12  # a * 2**32, signed
        shift = z[Y_FRACTION_BITS:Y_FRACTION_BITS + 7] + index[TABLE_BITS]  # up to 128
        s5 = _stages(m, en, 5, {
            "a": a[:22].as_signed(), "shift": shift[:8], "z": z[:RANGE_BITS],
            "in_range": s4["in_range"], "valid": s4["valid"]})

        # 5. E = T[i] - ((T[i] >> 15) * a) >> 17.
        scaled = data_stage(m, en, (read.data >> 15) * s5["a"], name="s6_scaled")
        t = data_stage(m, en, read.data, name="s6_table")
        s6 = _stages(m, en, 6, {name: s5[name] for name in ("shift", "z", "in_range", "valid")})
        # (meaningless out of range: ``in_range`` low)
        s7 = _stages(m, en, 7, {
            "mantissa": (t - (scaled >> 17))[:32], **{name: s6[name] for name in s6}})

        # 6. The term floor(E * 2**(17 - k)) = (E << 17) >> k and the outputs; k > 48 leaves
        #    no bit above 2**-48: a 6-bit shift and a zero case.
        k = s7["shift"]
        shifted = (Cat(Const(0, TERM_BITS - MANTISSA_BITS), s7["mantissa"]) >> k[:6])
        term = Mux(k[6:].any(), 0, shifted)[:TERM_BITS + 1]
        m.d.comb += [
            self.mantissa.eq(data_stage(m, en, s7["mantissa"], name="s8_mantissa")),
            self.shift.eq(data_stage(m, en, k, name="s8_shift")),
            self.term.eq(data_stage(m, en, term, name="s8_term")),
            self.z.eq(data_stage(m, en, s7["z"], name="s8_z")),
            self.in_range.eq(data_stage(m, en, s7["in_range"], name="s8_in_range")),
            self.out_valid.eq(stage(m, en, s7["valid"], name="s8_valid")),
        ]
        return m


def _stages(m, en, number, values: dict) -> dict:
    """Stage ``number`` of a lane: each of ``values`` registered as ``s<number>_<name>``,
    datapath without a reset but for the ``valid`` flag (docs/timing.md, "The reset net")."""
    return {name: stage(m, en, value, name=f"s{number}_{name}", reset_less=name != "valid")
            for name, value in values.items()}


def counted_term(lane: LogitLane, z_limit, removed, apply_removed):
    """Whether a row pass counts ``lane``'s token (valid, in range, key at least the filter:
    ``z <= z_limit``, not removed when ``apply_removed``) and its term masked by that."""
    counted = (lane.out_valid & lane.in_range & (lane.z <= z_limit)
               & ~(apply_removed & removed))
    return counted, Mux(counted, lane.term, 0)


class LaneShare(wiring.Component):
    """One lane with its share of the row pass's accumulation, for the lane's resource
    estimate: the ``LogitLane``, the count decision and masked term of ``counted_term``, the
    term's register at the foot of the word's adder tree and one adder of the tree (``n`` lanes
    have ``n - 1`` adders, of mean width ``TREE_SUM_BITS`` for large ``n``) with one of the
    count tree's.

    Members
    -------
    LogitLane's inputs
        Passed through.
    z_limit : In(signed(KEY_BITS + 1)), removed : In(1), apply_removed : In(1)
        As ``counted_term``.
    partial, partial_count : In
        The other operand of the lane's tree adders.
    sum, count : Out
        The adders' registered outputs.
    """

    TREE_SUM_BITS = TERM_BITS + 1 + 2  # sum over levels l >= 1 of (49 + l) / 2**l
    TREE_COUNT_BITS = 3

    def __init__(self):
        self._lane = LogitLane()
        inputs = {name: In(member.shape) for name, member in self._lane.signature.members.items()
                  if member.flow == wiring.In}
        super().__init__({
            **inputs, "z_limit": In(signed(KEY_BITS + 1)), "removed": In(1),
            "apply_removed": In(1), "partial": In(self.TREE_SUM_BITS),
            "partial_count": In(self.TREE_COUNT_BITS),
            "sum": Out(self.TREE_SUM_BITS), "count": Out(self.TREE_COUNT_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.lane = lane = self._lane
        m.d.comb += [getattr(lane, name).eq(getattr(self, name))
                     for name, member in lane.signature.members.items()
                     if member.flow == wiring.In]
        counted, term = counted_term(lane, self.z_limit, self.removed, self.apply_removed)
        registered_term = stage(m, 1, term, name="tree_term")
        registered_count = stage(m, 1, counted, name="tree_counted")
        m.d.sync += [self.sum.eq(self.partial + registered_term),
                     self.count.eq(self.partial_count + registered_count)]
        return m


def synthesis_configuration() -> LaneShare:
    """One lane with its share of the accumulation, for ``python -m hw.synth
    tree_verify_lane`` (it has no build parameters)."""
    return LaneShare()
