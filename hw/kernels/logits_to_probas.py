"""K5 ``convert_logits_to_probas`` in hardware (docs/kernels.md §7), bit-exact with
``golden.logits_to_probas`` (the golden *is* the specification of this algorithm).

One request is one ``cmd`` beat (temperature ``T``, vocabulary ``V``, rows ``n``) followed by
``n`` rows of ``V`` logits on ``logits``, ``lanes`` elements per beat (``ceil(V / lanes)``
beats per row; lanes past ``V`` in the last beat are ignored). Every row yields one
``predict`` beat, its argmax (lowest index on ties, ``first``/``last`` mark the request's
first and last row). A *sampling* row (``T >= GREEDY_TEMPERATURE``) also yields its
probabilities on ``probs``, one packet of ``ceil(V / lanes)`` beats (``first``/``last`` mark
the row; lanes past ``V`` are ``+0.0``); a *greedy* row (``T < 1e-6``, ``T = 0`` included)
yields no ``probs`` beats: its probability row is the one-hot of its argmax, which the host
(or the next kernel) reconstructs from ``predict``. Requests are processed one after the
other, rows one after the other, each in three passes over an on-chip row buffer (ingest,
exp, output): a sampling row takes about ``3 * ceil(V / lanes) + 448`` clocks, a greedy
row ``ceil(V / lanes) + 1``. ``top_k`` is not implemented. Inputs outside the golden's contract
(``V = 0``, ``V > max_vocab_size``, NaN or ``+inf`` logits, ``T`` outside ``[0, 1e6]``) are
undefined behaviour.

The phases of a row, the operation sequences and the measured figures: docs/logits_to_probas.md;
the design decisions: docs/decisions.md, "K5 hardware".
"""

import math
from dataclasses import asdict, dataclass
from functools import cache

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, enum, stream
from amaranth.lib.memory import Memory

from golden.logits_to_probas import (
    _ROUND_MAGIC,
    _SPLITTER,
    EXP2_HI,
    EXP2_LO,
    EXP_C1,
    EXP_C2,
    EXP_C3,
    GREEDY_TEMPERATURE,
    LOG2E_HI,
    LOG2E_LO,
    RECIP_SEED,
    SUM_FRAC_BITS,
    T_CUTOFF,
)
from hw.lib.component import KernelComponent
from hw.lib.float32 import Float32Multiply, float32_fields, float32_less, float32_less_equal
from hw.lib.float32_dataflow import Float32Dataflow, Float32Sequencer
from hw.lib.params import ParameterRecord, index_bits, parameter
from hw.lib.pipeline import count_leading_zeros, stage
from hw.lib.stream import packet_layout, stalling_handshake

__all__ = ["LogitsToProbasParams", "LogitsToProbas", "synthesis_parameters",
           "synthesis_configuration", "exp_figures", "INPUT_FORMATS", "DEFAULTS",
           "float32_bits"]

INPUT_FORMATS = ("float32", "bfloat16")


def float32_bits(x) -> int:
    """The bit pattern of ``np.float32(x)``."""
    return int(np.array(x, np.float32).view(np.uint32))


_ONE = float32_bits(1.0)
_ZERO = 0
_NEG_INF = 0xFF80_0000
_SPLIT = float32_bits(_SPLITTER)
_MAGIC = float32_bits(_ROUND_MAGIC)
_SIXTY_FOUR = float32_bits(64.0)
_SIXTY_FOURTH = float32_bits(2.0**-6)
_CUTOFF = float32_bits(T_CUTOFF)
_GREEDY = float32_bits(GREEDY_TEMPERATURE)
EXP_C1_BITS, EXP_C2_BITS, EXP_C3_BITS = (float32_bits(c) for c in (EXP_C1, EXP_C2, EXP_C3))
LOG2E_HI_BITS, LOG2E_LO_BITS = float32_bits(LOG2E_HI), float32_bits(LOG2E_LO)


def order_key_greater(a: Value, b: Value) -> Value:
    """``float32_order_key(a) > float32_order_key(b)`` for any bit patterns (NaNs ordered by
    their magnitude, as the key orders them): two magnitude compares side by side, no
    negation in front of a compare."""
    fa, fb = float32_fields(a), float32_fields(b)
    return Mux(fa.sign, Mux(fb.sign, fa.magnitude < fb.magnitude, 0),
               Mux(fb.sign, ~(fa.is_zero & fb.is_zero), fa.magnitude > fb.magnitude))


# --- float32 operation sequences, literally the golden's ------------------------------------


def _two_sum(df, a, b):
    s = df.add(a, b)
    bb = df.sub(s, a)
    return s, df.add(df.sub(a, df.sub(s, bb)), df.sub(b, bb))


def _fast_two_sum(df, a, b):
    s = df.add(a, b)
    return s, df.sub(b, df.sub(s, a))


def _split(df, a):
    c = df.mul(_SPLIT, a)
    hi = df.sub(c, df.sub(c, a))
    return hi, df.sub(a, hi)


def _two_prod_split_b(df, a, b, b_hi, b_lo):
    """Dekker's TwoProd with ``b`` already split (``b_hi + b_lo``)."""
    p = df.mul(a, b)
    a_hi, a_lo = _split(df, a)
    inner = df.sub(df.sub(df.sub(p, df.mul(a_hi, b_hi)), df.mul(a_lo, b_hi)),
                   df.mul(a_hi, b_lo))
    return p, df.sub(df.mul(a_lo, b_lo), inner)


def _exp_element(df, logit, neg_max, c_hi, c_lo, c_hi_hi, c_hi_lo, all_neginf, keep):
    """Steps 1-6 of the golden's exponential for one lane; returns the ``e`` node."""
    d_hi, d_lo = _two_sum(df, logit, neg_max)
    p, p_err = _two_prod_split_b(df, d_hi, c_hi, c_hi_hi, c_hi_lo)
    tail = df.add(p_err, df.add(df.mul(d_hi, c_lo), df.mul(d_lo, c_hi)))
    t_hi, t_lo = _fast_two_sum(df, p, tail)

    def in_range(t):
        return float32_less_equal(Const(_CUTOFF, 32), t)

    # The range test (a 32-bit comparison) has a clock of its own, the masks the next.
    valid = df.comb(in_range, t_hi, name="valid")
    t_hi = df.comb(lambda t, v: Mux(v, t, 0), t_hi, valid, name="thi")
    t_lo = df.comb(lambda t, v: Mux(v, t, 0), t_lo, valid, name="tlo")
    y = df.mul(t_hi, _SIXTY_FOUR)
    ym = df.add(y, _MAGIC)
    kf = df.sub(ym, _MAGIC)
    r = df.sub(y, kf)
    f = df.add(df.mul(r, _SIXTY_FOURTH), t_lo)
    # ym = 1.5 * 2^23 + k lies in [2^23, 2^24): its fraction field is 2^22 + k.
    k = df.comb(lambda v: Cat(v[:23], Const(0, 1)).as_signed() - (1 << 22), ym, name="k")
    table_hi = Array(Const(float32_bits(x), 32) for x in EXP2_HI)
    table_lo = Array(Const(float32_bits(x), 32) for x in EXP2_LO)
    s_hi = df.comb(lambda v: table_hi[v[:6]], k, name="exphi")
    s_lo = df.comb(lambda v: table_lo[v[:6]], k, name="explo")

    def scale_bits(v, second):
        n = v.as_signed() >> 6
        n1 = Mux(n < -100, -100, n)
        exponent = (n - n1 if second else n1) + 127
        return Cat(Const(0, 23), exponent[:8], Const(0, 1))

    pow_first = df.comb(lambda v: scale_bits(v, False), k, name="pow1")
    pow_second = df.comb(lambda v: scale_bits(v, True), k, name="pow2")
    q = df.mul(f, df.add(EXP_C1_BITS, df.mul(f, df.add(EXP_C2_BITS, df.mul(f, EXP_C3_BITS)))))
    s = df.add(s_hi, df.add(s_lo, df.mul(s_hi, q)))
    e = df.mul(df.mul(s, pow_first), pow_second)
    return df.comb(lambda value, v, neginf, kept: Mux(~kept, 0, Mux(neginf, _ONE,
                                                                     Mux(v, value, 0))),
                   e, valid, all_neginf, keep, name="e")


def _recip_seed(seq, prefix, x: Value) -> list:
    """The statements of ``_recip_ff``'s first step: the seed (a 128-entry ROM) and the power
    of two of ``x`` into the registers ``<prefix>_seed`` and ``<prefix>_pow``."""
    seeds = Array(Const(float32_bits(v), 32) for v in RECIP_SEED)
    return [seq.reg(f"{prefix}_seed").eq(seeds[x[16:23]]),
            seq.reg(f"{prefix}_pow").eq(Cat(Const(0, 23), (254 - x[23:31])[:8], Const(0, 1)))]


def _recip_program(seq, prefix, x_hi, x_lo, *, seeded=False):
    """The golden's ``_recip_ff(x_hi, x_lo)`` as sequencer operations; returns the names of
    ``(r, r_lo)``. ``seeded``: the caller writes the first step (:func:`_recip_seed`) in the
    clock before the program starts."""
    if not seeded:
        x = seq.reg(x_hi)
        seq.fn(lambda: _recip_seed(seq, prefix, x))
    r = seq.mul(f"{prefix}_r0", f"{prefix}_seed", f"{prefix}_pow")
    for step in range(2):
        t = seq.mul(f"{prefix}_t", x_hi, r)
        u = seq.sub(f"{prefix}_u", _ONE, t)
        v = seq.mul(f"{prefix}_v", r, u)
        r = seq.add(f"{prefix}_r{step + 1}", r, v)
    p, p_err = _seq_two_prod(seq, prefix, x_hi, r)
    c = seq.sub(f"{prefix}_c1", _ONE, p)
    c = seq.sub(f"{prefix}_c2", c, p_err)
    xr = seq.mul(f"{prefix}_xr", x_lo, r)
    c = seq.sub(f"{prefix}_c3", c, xr)
    r_lo = seq.mul(f"{prefix}_rlo", r, c)
    return r, r_lo


def _seq_split(seq, prefix, a):
    c = seq.mul(f"{prefix}_sc", _SPLIT, a)
    t = seq.sub(f"{prefix}_st", c, a)
    hi = seq.sub(f"{prefix}_shi", c, t)
    lo = seq.sub(f"{prefix}_slo", a, hi)
    return hi, lo


def _seq_two_prod(seq, prefix, a, b):
    p = seq.mul(f"{prefix}_p", a, b)
    a_hi, a_lo = _seq_split(seq, f"{prefix}_a", a)
    b_hi, b_lo = _seq_split(seq, f"{prefix}_b", b)
    t = seq.mul(f"{prefix}_m1", a_hi, b_hi)
    inner = seq.sub(f"{prefix}_i1", p, t)
    t = seq.mul(f"{prefix}_m2", a_lo, b_hi)
    inner = seq.sub(f"{prefix}_i2", inner, t)
    t = seq.mul(f"{prefix}_m3", a_hi, b_lo)
    inner = seq.sub(f"{prefix}_i3", inner, t)
    t = seq.mul(f"{prefix}_m4", a_lo, b_lo)
    return p, seq.sub(f"{prefix}_err", t, inner)


def _leading_zero_steps(seq, value: Value, *, name: str) -> Signal:
    """Two sequencer steps that count the leading zeros of ``value`` (nonzero) into the
    returned register: per 8-bit group whether it holds a one and its own count, then a
    balanced selection of the first such group (a wide count in one clock is too deep for
    300 MHz)."""
    width = len(value)
    groups = 1 << max(0, (-(-width // 8) - 1).bit_length())  # a power of two
    padded = Cat(Const(0, 8 * groups - width), value)  # zeros below: the same count
    summary = Signal(4 * groups, name=f"{name}_groups")
    zeros = Signal(range(8 * groups), name=f"{name}_lz")

    def per_group():
        fields = []
        for g in range(groups):
            bits = padded[8 * g:8 * g + 8]
            fields += [count_leading_zeros(bits)[:3], bits.any()]
        return [summary.eq(Cat(*fields))]

    def select():
        # (has a one, leading zeros) per group, lowest first; a pair of halves of 2^k bits
        # counts the upper half's zeros, or 2^k plus the lower half's: no adder.
        nodes = [(summary[4 * g + 3], summary[4 * g:4 * g + 3]) for g in range(groups)]
        while len(nodes) > 1:
            nodes = [(high[0] | low[0], Mux(high[0], Cat(high[1], Const(0, 1)),
                                                    Cat(low[1], Const(1, 1))))
                     for low, high in zip(nodes[0::2], nodes[1::2], strict=True)]
        return [zeros.eq(nodes[0][1])]

    seq.fn(per_group)
    seq.fn(select)
    return zeros


def _float32_steps(seq, value: Value, *, frac_bits: int, name: str, result, sign=None,
                   zero=None, rounded=None):
    """Sequencer steps that write ``value * 2^-frac_bits`` (``value > 0``) rounded to float32,
    nearest even, into ``result``: leading zeros (two steps), the normalising shift, the
    rounding. ``sign``/``zero``: registers giving the result's sign and forcing ``+0.0``;
    ``rounded``: a register of ``len(value) - 23`` bits that receives the rounded significand
    with its carry (the rounded integer is ``rounded << (len(value) - 24) >> zeros``).
    Returns the leading-zero register."""
    width = len(value)
    zeros = _leading_zero_steps(seq, value, name=name)
    normal = Signal(width, name=f"{name}_normal")
    exponent = Signal(8, name=f"{name}_exponent")
    seq.fn(lambda: [normal.eq((value << zeros)[:width]),
                    exponent.eq(((width - 1 + 127 - frac_bits) - zeros)[:8])])

    def round_to_nearest_even():
        mantissa = normal[width - 24:]
        round_up = normal[width - 25] & (normal[:width - 25].any() | mantissa[0])
        bits = Cat((Cat(mantissa[:23], exponent) + round_up)[:31],
                   Const(0, 1) if sign is None else sign)
        statements = [result.eq(bits if zero is None else Mux(zero, 0, bits))]
        if rounded is not None:
            statements.append(rounded.eq(mantissa + round_up))
        return statements

    seq.fn(round_to_nearest_even)
    return zeros


class Phase(enum.Enum, shape=3):
    """Where a request is: waiting for ``cmd``, computing its row constants, ingesting a row,
    sending its argmax, the exponential pass, the row's normaliser, the output pass."""

    IDLE = 0
    REQUEST = 1
    INGEST = 2
    PREDICT = 3
    EXP = 4
    ROW = 5
    OUT = 6


@dataclass(frozen=True)
class LogitsToProbasParams(ParameterRecord):
    """Validated build parameters of :class:`LogitsToProbas` and the port layouts they give
    (testbenches and the host read layouts here without building the component)."""

    max_vocab_size: int = parameter(
        131072, "Largest ``V``; sizes the row buffer (``ceil(max_vocab_size / lanes)`` words) "
                "and the token width.", hi=1 << 24)
    lanes: int = parameter(1, "Elements per beat and per clock in every pass.", hi=16,
                           power_of_two=True)
    input_format: str = parameter(
        "float32", "``bfloat16``: ``logits`` lanes of 16 bits, converted exactly.",
        choices=INPUT_FORMATS)
    row_count_width: int = parameter(16, "Width of the request's row count ``num_rows``.",
                                     hi=32)

    @property
    def max_words(self) -> int:
        """Words of the row buffer, ``ceil(max_vocab_size / lanes)``."""
        return -(-self.max_vocab_size // self.lanes)

    @property
    def token_width(self) -> int:
        return index_bits(self.max_vocab_size)

    @property
    def accumulator_width(self) -> int:
        """Bits of the exact sum of ``floor(e * 2^64)`` over a row."""
        return max(1, math.ceil(math.log2(self.max_vocab_size))) + 65

    @property
    def element_width(self) -> int:
        """Bits of one ``logits`` lane."""
        return 16 if self.input_format == "bfloat16" else 32

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "temperature": 32,
            "vocab_size": unsigned(self.max_vocab_size.bit_length()),
            "num_rows": unsigned(self.row_count_width),
        })

    @property
    def logits_layout(self) -> data.StructLayout:
        return packet_layout({"data": data.ArrayLayout(self.element_width, self.lanes)})

    @property
    def probs_layout(self) -> data.StructLayout:
        return packet_layout({"data": data.ArrayLayout(32, self.lanes)})

    @property
    def predict_layout(self) -> data.StructLayout:
        return packet_layout({"token": unsigned(self.token_width)})

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"cmd": self.cmd_layout, "logits": self.logits_layout,
                "probs": self.probs_layout, "predict": self.predict_layout}


#: The default parameters (``synthesis_parameters()`` and ``make sim``'s build).
DEFAULTS = asdict(LogitsToProbasParams())


@cache
def exp_figures() -> dict:
    """``latency`` (clocks of the exp pipeline), ``adds`` and ``multiplies`` per element,
    from a throw-away elaboration of one lane (the same for every parameter set)."""
    df = Float32Dataflow(None, Const(1), name="probe")
    s = Signal(32)
    e = _exp_element(df, df.input(s), df.static(s), df.static(s), df.static(s),
                     df.static(s), df.static(s), df.static(Signal()), df.input(Signal()))
    return {"latency": e.time, "adds": df.adds, "multiplies": df.multiplies}


class LogitsToProbas(KernelComponent):
    """K5: row softmax with temperature and row argmax, bit-exact with the golden.

    Parameters
    ----------
    max_vocab_size, lanes, input_format, row_count_width
        See :class:`LogitsToProbasParams` (validated there; ``params`` holds the record).

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per request: ``temperature`` (float32 bits, ``0 <= T <= 1e6``),
        ``vocab_size`` (``1 <= V <= max_vocab_size``), ``num_rows`` (``n >= 1``).
    logits : In(stream.Signature(logits_layout))
        ``n`` rows of ``ceil(V / lanes)`` beats: ``data`` (``lanes`` elements, element ``j``
        of the row in lane ``j % lanes`` of beat ``j // lanes``), ``first``/``last`` (not
        checked: the kernel counts).
    probs : Out(stream.Signature(probs_layout))
        Sampling rows only: ``ceil(V / lanes)`` beats of float32 probabilities per row
        (``first``/``last`` mark the row; lanes past ``V`` are ``+0.0``).
    predict : Out(stream.Signature(predict_layout))
        One beat per row: ``token`` the argmax (lowest index on ties, 0 for an all ``-inf``
        row); ``first``/``last`` mark the request's first and last rows.
    """

    Params = LogitsToProbasParams
    OUTPUTS = ("probs", "predict")

    def exp_figures(self) -> dict:
        """:func:`exp_figures`."""
        return exp_figures()

    def elaborate(self, platform):
        m = Module()
        params = self._params
        lanes, shift = params.lanes, params.lanes.bit_length() - 1
        words_max = params.max_words
        token_width = params.token_width
        cmd_layout = params.cmd_layout

        # --- request and row state ------------------------------------------------------
        temperature = Signal(32)
        vocab = Signal(cmd_layout["vocab_size"].shape)
        rows = Signal(params.row_count_width)
        row = Signal(params.row_count_width)
        words = Signal(range(words_max + 1))
        greedy = Signal()
        m_bits = Signal(32)
        m_index = Signal(token_width)
        have = Signal()
        last_row = Signal()  # row + 1 == rows, registered (a comparison less on the way)
        # row + 2 == rows, a clock behind row: a row takes two clocks at least, so it is
        # up to date when a row ends (and last_row takes it).
        next_last_row = Signal(reset_less=True)
        m.d.sync += next_last_row.eq(row + 2 == rows)

        m.submodules.buffer = buffer = Memory(shape=unsigned(32 * lanes), depth=words_max,
                                              init=[])
        wport = buffer.write_port()
        rport = buffer.read_port(domain="sync")

        # --- the sequencer: per-request and per-row constants -------------------------
        seq = Float32Sequencer(name="seq")
        seq.reg("T")
        seq.reg("zero")
        seq.program("request")
        # Its first step (the seed of 1/T) is taken from the cmd beat, so the program starts
        # the clock after it, registered, and ends when it did with the step.
        r_hi, r_lo = _recip_program(seq, "rt", "T", "zero", seeded=True)
        p, p_err = _seq_two_prod(seq, "cp", LOG2E_HI_BITS, r_hi)
        a = seq.mul("ca", LOG2E_HI_BITS, r_lo)
        b = seq.mul("cb", LOG2E_LO_BITS, r_hi)
        a = seq.add("cab", a, b)
        p_err = seq.add("cperr", p_err, a)
        c_hi = seq.add("C_hi", p, p_err)
        t = seq.sub("ct", c_hi, p)
        seq.sub("C_lo", p_err, t)
        _seq_split(seq, "C", "C_hi")  # C_shi, C_slo

        # S_hi = the exact integer sum rounded to float32, S_lo = the remainder's rounding,
        # in one-clock integer steps short enough for 300 MHz.
        acc_width = params.accumulator_width
        accumulator = Signal(acc_width)
        rounded = Signal(acc_width - 23)
        top = Signal(acc_width + 1)
        negative = Signal()
        rest_zero = Signal()
        rest_abs = Signal(acc_width)
        s_hi, s_lo = seq.reg("S_hi"), seq.reg("S_lo")
        seq.program("row")
        zeros = _float32_steps(seq, accumulator, frac_bits=SUM_FRAC_BITS, name="sum",
                               result=s_hi, rounded=rounded)
        seq.fn(lambda: [top.eq((Cat(Const(0, acc_width - 24), rounded) >> zeros)
                               [:acc_width + 1])])
        seq.fn(lambda: [negative.eq(accumulator < top), rest_zero.eq(accumulator == top),
                        rest_abs.eq(Mux(accumulator < top, top - accumulator,
                                        accumulator - top)[:acc_width])])
        _float32_steps(seq, rest_abs, frac_bits=SUM_FRAC_BITS, name="rest", result=s_lo,
                       sign=negative, zero=rest_zero)
        inv_hi, inv_lo = _recip_program(seq, "rs", "S_hi", "S_lo")
        seq.add("inv", inv_hi, inv_lo)
        seq.elaborate(m)
        inv = seq.reg("inv")
        m.d.comb += seq.reg("zero").eq(0)

        # --- states -----------------------------------------------------------------------
        state = Signal(Phase)
        issue = Signal(range(words_max + 1))
        done = Signal(range(words_max + 1))
        exp_done = Signal()  # done == words, kept beside done (it starts the row program)

        def lane_keep(word):
            base = Value.cast(word) << shift
            return Cat(*((base + i) < vocab for i in range(lanes)))

        # cmd
        start_request = Signal()  # the request program starts: the clock after the cmd beat
        m.d.comb += [self.cmd.ready.eq(state == Phase.IDLE),
                     seq.start("request").eq(start_request)]
        m.d.sync += start_request.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            payload = self.cmd.payload
            is_greedy = float32_less(payload.temperature, Const(_GREEDY, 32))
            m.d.sync += [temperature.eq(payload.temperature), vocab.eq(payload.vocab_size),
                         rows.eq(payload.num_rows), row.eq(0), greedy.eq(is_greedy),
                         last_row.eq(payload.num_rows == 1),
                         words.eq((payload.vocab_size + (lanes - 1)) >> shift),
                         seq.reg("T").eq(payload.temperature),
                         *_recip_seed(seq, "rt", payload.temperature)]
            m.d.sync += [issue.eq(0), have.eq(0)]
            with m.If(is_greedy):
                m.d.sync += state.eq(Phase.INGEST)
            with m.Else():
                m.d.sync += [state.eq(Phase.REQUEST), start_request.eq(1)]
        with m.If((state == Phase.REQUEST) & ~start_request & ~seq.busy):
            m.d.sync += state.eq(Phase.INGEST)

        # Ingest: store, running max and argmax.
        m.d.comb += self.logits.ready.eq(state == Phase.INGEST)
        beat = self.logits.payload.data
        if params.input_format == "bfloat16":
            elements = [Cat(Const(0, 16), beat[i]) for i in range(lanes)]
        else:
            elements = [beat[i] for i in range(lanes)]
        ingest_keep = lane_keep(issue)
        best_bits, best_index, best_have = m_bits, m_index, have
        for i in range(lanes):
            better = ingest_keep[i] & (~best_have | order_key_greater(elements[i], best_bits))
            nb = Signal(32, name=f"best_bits{i}")
            ni = Signal(token_width, name=f"best_index{i}")
            nh = Signal(name=f"best_have{i}")
            m.d.comb += [nb.eq(Mux(better, elements[i], best_bits)),
                         ni.eq(Mux(better, ((issue << shift) + i)[:token_width], best_index)),
                         nh.eq(best_have | ingest_keep[i])]
            best_bits, best_index, best_have = nb, ni, nh
        with m.If(self.logits.valid & self.logits.ready):
            m.d.comb += [wport.addr.eq(issue), wport.data.eq(Cat(*elements)), wport.en.eq(1)]
            m.d.sync += [m_bits.eq(best_bits), m_index.eq(best_index), have.eq(best_have),
                         issue.eq(issue + 1)]
            with m.If(issue + 1 == words):
                m.d.sync += state.eq(Phase.PREDICT)

        # Predict.
        m.d.comb += [self.predict.valid.eq(state == Phase.PREDICT),
                     self.predict.payload.token.eq(m_index),
                     self.predict.payload.first.eq(row == 0),
                     self.predict.payload.last.eq(last_row)]
        next_row = Signal()
        with m.If(self.predict.valid & self.predict.ready):
            with m.If(greedy):
                m.d.comb += next_row.eq(1)
            with m.Else():
                m.d.sync += [state.eq(Phase.EXP), issue.eq(0), done.eq(0), exp_done.eq(0),
                             accumulator.eq(0)]

        # Exp pass: read, exponentiate, write back, accumulate.
        exp_issue = (state == Phase.EXP) & (issue < words)
        with m.If(exp_issue):
            m.d.sync += issue.eq(issue + 1)
        df = Float32Dataflow(m, Const(1), name="exp")
        in_valid = stage(m, Const(1), exp_issue, name="exp_v0")
        in_addr = stage(m, Const(1), issue, name="exp_a0")
        in_keep = stage(m, Const(1), lane_keep(issue), name="exp_k0")
        neg_max = df.static(Cat(m_bits[:31], ~m_bits[31]))
        all_neginf = df.static(m_bits == _NEG_INF)
        c_nodes = [df.static(seq.reg(name)) for name in ("C_hi", "C_lo", "C_shi", "C_slo")]
        keep_node = df.input(in_keep)
        e_nodes = []
        for i in range(lanes):
            # Registered first: the memory's output has no register of its own.
            logit = df.comb(lambda v: v, df.input(rport.data[32 * i:32 * (i + 1)]),
                            name=f"logit{i}_")
            keep_i = df.comb(lambda k, i=i: k[i], keep_node, name=f"keep{i}_")
            e_nodes.append(_exp_element(df, logit, neg_max, *c_nodes, all_neginf, keep_i))
        _, aligned = df.align(df.input(in_valid), df.input(in_addr), *e_nodes)
        out_valid, out_addr, *e_values = aligned
        with m.If(state == Phase.EXP):
            m.d.comb += [wport.addr.eq(out_addr), wport.data.eq(Cat(*e_values)),
                         wport.en.eq(out_valid)]

        # floor(e * 2^64) in two clocks: the shift amounts, then the shift.
        def shift_amounts(e):
            fields = float32_fields(e)
            exponent = fields.exponent_eff
            return Cat(fields.mantissa, (exponent - 86)[:6], (86 - exponent)[:7],
                       exponent >= 86)

        def fixed(amounts):
            mantissa, up_by, down_by, up = amounts[:24], amounts[24:30], amounts[30:37], \
                amounts[37]
            return Mux(up, (mantissa << up_by)[:65], (mantissa >> down_by)[:65])

        fixed_values = [stage(m, Const(1), fixed(stage(m, Const(1), shift_amounts(e),
                                                       name=f"shift{i}")), name=f"fixed{i}")
                        for i, e in enumerate(e_values)]
        fixed_valid = stage(m, Const(1), stage(m, Const(1), out_valid, name="shift_valid"),
                            name="fixed_valid")
        lane_sum = stage(m, Const(1), sum(fixed_values[1:], Value.cast(fixed_values[0])),
                         name="lane_sum")
        sum_valid = stage(m, Const(1), fixed_valid, name="sum_valid")
        with m.If(sum_valid):
            m.d.sync += [accumulator.eq(accumulator + lane_sum), done.eq(done + 1),
                         exp_done.eq(done + 1 == words)]
        with m.If((state == Phase.EXP) & exp_done):
            m.d.comb += seq.start("row").eq(1)
            m.d.sync += state.eq(Phase.ROW)
        with m.If((state == Phase.ROW) & ~seq.busy):
            m.d.sync += [state.eq(Phase.OUT), issue.eq(0)]

        # Output pass: p = e * inv, a stalling pipeline (memory read, a register behind the
        # memory, multiply).
        out_latency = 2 + Float32Multiply.latency
        source = stream.Signature(1).create()
        m.d.comb += source.valid.eq((state == Phase.OUT) & (issue < words))
        enable = stalling_handshake(m, latency=out_latency, source=source, sink=self.probs)
        with m.If(source.valid & source.ready):
            m.d.sync += issue.eq(issue + 1)
        m.d.comb += [rport.addr.eq(issue), rport.en.eq(Mux(state == Phase.OUT, enable, 1))]
        side = Cat(lane_keep(issue), issue == 0, issue + 1 == words)
        for index in range(out_latency):
            side = stage(m, enable, side, name=f"out_side{index}")
        products = []
        for i in range(lanes):
            m.submodules[f"out_mul{i}"] = mul = Float32Multiply()
            e_read = stage(m, enable, rport.data[32 * i:32 * (i + 1)], name=f"out_e{i}")
            m.d.comb += [mul.en.eq(enable), mul.a.eq(e_read), mul.b.eq(inv)]
            products.append(Mux(side[i], mul.result, 0))
        m.d.comb += [self.probs.payload.data.eq(Cat(*products)),
                     self.probs.payload.first.eq(side[lanes]),
                     self.probs.payload.last.eq(side[lanes + 1])]
        with m.If(self.probs.valid & self.probs.ready & side[lanes + 1]):
            m.d.comb += next_row.eq(1)

        with m.If(next_row):
            m.d.sync += [row.eq(row + 1), issue.eq(0), have.eq(0),
                         last_row.eq(next_last_row)]
            with m.If(last_row):
                m.d.sync += state.eq(Phase.IDLE)
            with m.Else():
                m.d.sync += state.eq(Phase.INGEST)
        return m


def synthesis_parameters(**overrides) -> LogitsToProbasParams:
    """The parameters of the synthesis report: ``DEFAULTS``, i.e. vocabularies up to 131072
    (Llama 3's 128256), 1 lane, float32 input (``lanes``/``input_format`` overrides widen
    it)."""
    return LogitsToProbasParams(**{**DEFAULTS, **overrides})


def synthesis_configuration(**overrides) -> LogitsToProbas:
    """K5 at ``synthesis_parameters(**overrides)``."""
    return LogitsToProbas(**asdict(synthesis_parameters(**overrides)),
                          src_loc_at=1)  # located at the caller
