"""The fused verify's wide dividers (docs/tree_verify.md), bit-exact with
``golden.logit_rows``: ``RatioToFloat32`` (a probability ``e / S`` rounded once to float32,
``ratio_to_float32``) and ``TemperatureScale`` (``log2(e) / T`` to 26 bits,
``temperature_scale``). Both are iterative around one shared ``RestoringDivider`` (one
division in flight, ``bits_per_clock`` trial subtractions per clock, a fixed latency): the
``request`` is taken only while idle and the ``response`` held until it is taken.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.logit_rows import LOG2E_Q64, SCALE_BITS

from .float32_divide import quotient_alignment
from .params import check_int
from .pipeline import dropped_bits, leading_zero_groups, leading_zeros_from_groups

__all__ = ["RestoringDivider", "RatioToFloat32", "TemperatureScale", "RATIO_QUOTIENT_BITS",
           "SCALE_QUOTIENT_BITS"]

#: Quotient bits of ``RatioToFloat32``: 24 significand bits, the guard bit and one bit for the
#: operands' order (the normalised quotient lies in ``(1/2, 2)``).
RATIO_QUOTIENT_BITS = 26
#: Quotient bits of ``TemperatureScale``: 26 mantissa bits, the guard bit and the order bit.
SCALE_QUOTIENT_BITS = SCALE_BITS + 2
_T_BITS = 24  # significand of a normal float32 temperature
_POSITIVE_INFINITY = 0x7F800000


def _restoring_steps(m, remainder, quotient, tail, divisor, count, *, name):
    """``count`` restoring iterations (trial subtraction, quotient bit, the top of ``tail``
    shifted into the remainder); each kept remainder a named signal (a linear chain for the
    simulator, readable in waveforms)."""
    width = len(divisor)
    for step in range(count):
        difference = remainder - divisor
        bit = ~difference[-1]  # remainder >= divisor
        kept = Signal(width, name=f"{name}{step}_kept")
        m.d.comb += kept.eq(Mux(bit, difference[:width], remainder[:width]))
        remainder = Cat(tail[-1] if len(tail) else Const(0, 1), kept)
        tail = Cat(Const(0, 1), tail)[:len(tail)]
        quotient = Cat(bit, quotient)[:len(quotient)]
    return remainder, quotient, tail


def _group_registers(width: int, name: str) -> list[tuple[Signal, Signal]]:
    """Registers for ``leading_zero_groups`` of a ``width``-bit value (datapath: no reset)."""
    return [(Signal(name=f"{name}_holds{k}", reset_less=True),
             Signal(len(count), name=f"{name}_count{k}", reset_less=True))
            for k, (_, count) in enumerate(leading_zero_groups(Const(0, width)))]


def _store_groups(registers, value) -> list:
    """Statements loading ``registers`` (``_group_registers``) with ``value``'s groups."""
    return [statement for (holds, count), (value_holds, value_count)
            in zip(registers, leading_zero_groups(value), strict=True)
            for statement in (holds.eq(value_holds), count.eq(value_count))]


def _hold(m, response):
    """The FSM state ``HOLD``: the result offered on ``response`` until taken, then ``IDLE``."""
    with m.State("HOLD"):
        m.d.comb += response.valid.eq(1)
        with m.If(response.ready):
            m.next = "IDLE"


class RestoringDivider(wiring.Component):
    """Sequential restoring division, the core of both wide dividers.

    ``load`` takes ``dividend = R * 2**tail_bits + tail`` and ``divisor`` (``R < 2 *
    divisor`` required); ``iterations`` clocks later ``done`` rises and ``quotient`` holds
    ``floor(dividend * 2**(quotient_bits - 1) / (divisor * 2**tail_bits))`` and ``inexact``
    whether that division left a remainder. Outputs hold until the next ``load``.

    Parameters
    ----------
    divisor_bits : int
        Width of the divisor (the remainder has one more bit), at least 1.
    quotient_bits : int
        Quotient bits, one per trial subtraction, at least 1.
    tail_bits : int
        Dividend bits below the remainder, shifted in one per iteration (keyword, default 0).
    bits_per_clock : int
        Trial subtractions per clock (keyword, 1..``quotient_bits``, default 1); the last clock
        does the rest when it does not divide ``quotient_bits``.

    Members
    -------
    load : In(1)
        Start a division (also restarts one in progress).
    dividend : In(divisor_bits + tail_bits); divisor : In(divisor_bits)
        The operands, read when ``load`` is high.
    done : Out(1)
        No division in progress (high from ``iterations`` clocks after ``load``).
    quotient : Out(quotient_bits); inexact : Out(1)
        The result; ``inexact``: the remainder or the dividend bits never shifted in are not 0.
    """

    def __init__(self, divisor_bits, quotient_bits, *, tail_bits=0, bits_per_clock=1):
        self._divisor_bits = check_int("divisor_bits", divisor_bits, 1)
        self._quotient_bits = check_int("quotient_bits", quotient_bits, 1)
        self._tail_bits = check_int("tail_bits", tail_bits, 0)
        self._bits_per_clock = check_int("bits_per_clock", bits_per_clock, 1, quotient_bits)
        super().__init__({
            "load": In(1),
            "dividend": In(divisor_bits + tail_bits),
            "divisor": In(divisor_bits),
            "done": Out(1),
            "quotient": Out(quotient_bits),
            "inexact": Out(1),
        })

    @property
    def iterations(self) -> int:
        """Clocks of one division: ``ceil(quotient_bits / bits_per_clock)``."""
        return -(-self._quotient_bits // self._bits_per_clock)

    def elaborate(self, platform):
        m = Module()
        # The operands are datapath (no reset: docs/timing.md, "The reset net"); ``count``
        # is the control state.
        remainder = Signal(self._divisor_bits + 1, reset_less=True)
        divisor = Signal(self._divisor_bits, reset_less=True)
        quotient = Signal(self._quotient_bits, reset_less=True)
        tail = Signal(self._tail_bits, reset_less=True)
        count = Signal(range(self.iterations + 1))
        m.d.comb += [self.done.eq(count == 0), self.quotient.eq(quotient),
                     self.inexact.eq(remainder.any() | tail.any())]
        state = (remainder, quotient, tail)
        following = _restoring_steps(m, *state, divisor, self._bits_per_clock, name="step")
        if short := self._quotient_bits % self._bits_per_clock:  # the last clock's share
            last = _restoring_steps(m, *state, divisor, short, name="last")
            following = [Mux(count == 1, a, b) for a, b in zip(last, following, strict=True)]
        with m.If(self.load):
            m.d.sync += [remainder.eq(self.dividend[self._tail_bits:]),
                         tail.eq(self.dividend[:self._tail_bits]), divisor.eq(self.divisor),
                         quotient.eq(0), count.eq(self.iterations)]
        with m.Elif(count != 0):
            m.d.sync += [a.eq(b) for a, b in zip(state, following, strict=True)]
            m.d.sync += count.eq(count - 1)
        return m


class RatioToFloat32(wiring.Component):
    """``numerator * 2**scale / denominator`` rounded once to float32 (nearest even,
    subnormals kept, ``+inf`` on overflow), bit-exact with ``golden.logit_rows
    .ratio_to_float32`` (``ratio_to_float32(numerator << scale, denominator)``, or
    ``ratio_to_float32(numerator, denominator << -scale)`` for a negative scale).

    A zero numerator gives ``0.0``; a zero denominator (outside the contract) with a nonzero
    numerator gives ``+inf``. Steps: leading-zero counts, both operands normalised, 26
    quotient bits, the order bit folded (``24`` significand bits, guard, sticky), the subnormal
    shift with sticky, rounding; the response is valid :attr:`latency` clocks after the clock
    in which the request transferred, and the next request is taken the clock after the
    response transferred.

    Parameters
    ----------
    numerator_bits : int
        Width of ``numerator``, 1..128 (default 32).
    denominator_bits : int
        Width of ``denominator``, 1..128 (default 73).
    scale_bits : int
        Width of the signed ``scale``, 1..16 (default 10).
    bits_per_clock : int
        Quotient bits per clock (keyword, 1..26, default 1; a 74-bit trial subtraction each).

    Members
    -------
    request : In(stream.Signature(request_layout))
        ``numerator`` unsigned(numerator_bits), ``denominator`` unsigned(denominator_bits),
        ``scale`` signed(scale_bits).
    response : Out(stream.Signature(32))
        The quotient's float32 bit pattern.
    """

    def __init__(self, numerator_bits=32, denominator_bits=73, scale_bits=10, *,
                 bits_per_clock=1):
        self._numerator_bits = check_int("numerator_bits", numerator_bits, 1, 128)
        self._denominator_bits = check_int("denominator_bits", denominator_bits, 1, 128)
        self._scale_bits = check_int("scale_bits", scale_bits, 1, 16)
        self._bits_per_clock = check_int("bits_per_clock", bits_per_clock, 1,
                                         RATIO_QUOTIENT_BITS)
        self._request_layout = data.StructLayout({
            "numerator": unsigned(numerator_bits), "denominator": unsigned(denominator_bits),
            "scale": signed(scale_bits)})
        super().__init__({"request": In(stream.Signature(self._request_layout)),
                          "response": Out(stream.Signature(32))})

    @property
    def request_layout(self) -> data.StructLayout:
        return self._request_layout

    @property
    def latency(self) -> int:
        """``6 + ceil(26 / bits_per_clock)`` clocks (32 at one bit per clock)."""
        return 6 + -(-RATIO_QUOTIENT_BITS // self._bits_per_clock)

    def elaborate(self, platform):
        m = Module()
        nb, db = self._numerator_bits, self._denominator_bits
        m.submodules.divider = divider = RestoringDivider(
            db, RATIO_QUOTIENT_BITS, tail_bits=max(nb - db, 0),
            bits_per_clock=self._bits_per_clock)
        # Every register but the FSM's is datapath: no reset (docs/timing.md, "The reset net").
        numerator, denominator = Signal(nb, reset_less=True), Signal(db, reset_less=True)
        scale = Signal(signed(self._scale_bits), reset_less=True)
        numerator_zeros = Signal(range(nb + 1), reset_less=True)
        denominator_zeros = Signal(range(db + 1), reset_less=True)
        # The leading-zero counts in two halves: the group tables registered with the operands,
        # the priority selection in COUNT (the whole count in COUNT was 8-9 LUT levels).
        numerator_groups = _group_registers(nb, "numerator")
        denominator_groups = _group_registers(db, "denominator")
        smax = 1 << (self._scale_bits - 1)  # biased exponents, every operand and scale:
        shape = Shape.cast(range(126 - db - smax, nb + 127 + smax))
        base = Signal(shape, reset_less=True)  # before the leading zeros
        exponent = Signal(shape, reset_less=True)  # for an order bit of 1
        # ALIGN's shift, field and overflow (``quotient_alignment``) for an order bit of 0
        # and of 1, registered while the divider runs.
        aligns = [{"right": Signal(6, name=f"right{t}", reset_less=True),
                   "field": Signal(8, name=f"field{t}", reset_less=True),
                   "overflow": Signal(name=f"overflow{t}", reset_less=True)} for t in (0, 1)]
        # ... and the one of them the quotient's order bit picks (a clock ahead of ALIGN's shift)
        align = {name: Signal.like(signal, name=f"{name}_picked", reset_less=True)
                 for name, signal in aligns[0].items()}
        # 24 significand bits and guard
        fraction, aligned = Signal(25, reset_less=True), Signal(25, reset_less=True)
        lost_mask = Signal(25, reset_less=True)  # the bits of `fraction` ALIGN shifts out
        sticky, aligned_sticky, zero, infinite, overflow = (
            Signal(name=name, reset_less=True)
            for name in ("sticky", "aligned_sticky", "zero", "infinite", "overflow"))
        field, result = Signal(8, reset_less=True), Signal(32, reset_less=True)
        m.d.comb += self.response.payload.eq(result)

        with m.FSM(name="ratio"):
            with m.State("IDLE"):
                m.d.comb += self.request.ready.eq(1)
                with m.If(self.request.valid):
                    payload = self.request.payload
                    m.d.sync += [numerator.eq(payload.numerator),
                                 denominator.eq(payload.denominator), scale.eq(payload.scale),
                                 *_store_groups(numerator_groups, payload.numerator),
                                 *_store_groups(denominator_groups, payload.denominator)]
                    m.next = "COUNT"
            with m.State("COUNT"):
                m.d.sync += [numerator_zeros.eq(leading_zeros_from_groups(numerator_groups)),
                             denominator_zeros.eq(leading_zeros_from_groups(denominator_groups)),
                             base.eq(nb - db + 127 + scale)]
                m.next = "NORMALISE"
            with m.State("NORMALISE"):
                normal_numerator = (numerator << numerator_zeros)[:nb]
                m.d.comb += [divider.load.eq(1),
                             divider.dividend.eq(normal_numerator << max(db - nb, 0)),
                             divider.divisor.eq((denominator << denominator_zeros)[:db])]
                m.d.sync += [exponent.eq(base + denominator_zeros - numerator_zeros),
                             zero.eq(numerator_zeros == nb), infinite.eq(denominator_zeros == db)]
                m.next = "DIVIDE"
            with m.State("DIVIDE"):
                for t, candidate in enumerate(aligns):
                    ahead = quotient_alignment((exponent - 1 + t).as_signed())
                    m.d.sync += [candidate[name].eq(ahead[name]) for name in candidate]
                with m.If(divider.done):  # (``aligns`` are set: DIVIDE's second clock or later)
                    quotient = divider.quotient
                    top = quotient[-1]
                    m.d.sync += [fraction.eq(Mux(top, quotient[1:], quotient[:-1])),
                                 sticky.eq(divider.inexact | (top & quotient[0])),
                                 *(align[name].eq(Mux(top, aligns[1][name], aligns[0][name]))
                                   for name in align),
                                 lost_mask.eq(Mux(top, *(dropped_bits(t["right"], len(fraction))
                                                         for t in reversed(aligns))))]
                    m.next = "ALIGN"
            with m.State("ALIGN"):
                # The shift and, beside it, the bits it drops: the mask is a register (a
                # shift with its sticky bit was 7 to 9 LUT levels).
                m.d.sync += [aligned.eq(fraction >> align["right"]),
                             aligned_sticky.eq(sticky | (fraction & lost_mask).any()),
                             field.eq(align["field"]),
                             overflow.eq(align["overflow"] | infinite)]
                m.next = "ROUND"
            with m.State("ROUND"):
                guard, significand = aligned[0], aligned[1:]
                round_up = guard & (aligned_sticky | significand[0])
                magnitude = (Cat(significand[:23], field) + round_up)[:31]
                m.d.sync += result.eq(Mux(zero, 0, Mux(overflow, _POSITIVE_INFINITY,
                                                       magnitude)))
                m.next = "HOLD"
            _hold(m, self.response)
        return m


class TemperatureScale(wiring.Component):
    """``c = log2(e) / T = mantissa * 2**exponent`` for a float32 temperature, bit-exact with
    ``golden.logit_rows.temperature_scale``: ``LOG2E_Q64 / t`` (``t`` the 24-bit
    significand) to 26 bits, rounded to nearest even from a guard bit and a sticky remainder.

    The caller guarantees a normal positive temperature (``T >= 1e-6``): the sign is ignored
    and the implicit significand bit always set. The response is valid :attr:`latency` clocks
    after the clock in which the request transferred, and the next request is taken the clock
    after the response transferred.

    Parameters
    ----------
    bits_per_clock : int
        Quotient bits per clock (keyword, 1..28, default 1; a 25-bit trial subtraction each).

    Members
    -------
    request : In(stream.Signature(32))
        The temperature's float32 bit pattern.
    response : Out(stream.Signature(response_layout))
        ``mantissa`` unsigned(26) (top bit set), ``exponent`` signed(9).
    """

    response_layout = data.StructLayout({"mantissa": unsigned(SCALE_BITS), "exponent": signed(9)})
    #: ``round(log2(e) * 2**64)`` (65 bits; a test subclass divides another 65-bit constant).
    DIVIDEND = LOG2E_Q64

    def __init__(self, *, bits_per_clock=1):
        self._bits_per_clock = check_int("bits_per_clock", bits_per_clock, 1,
                                         SCALE_QUOTIENT_BITS)
        super().__init__({"request": In(stream.Signature(32)),
                          "response": Out(stream.Signature(self.response_layout))})

    @property
    def latency(self) -> int:
        """``2 + ceil(28 / bits_per_clock)`` clocks (30 at one bit per clock)."""
        return 2 + -(-SCALE_QUOTIENT_BITS // self._bits_per_clock)

    def elaborate(self, platform):
        m = Module()
        m.submodules.divider = divider = RestoringDivider(
            _T_BITS, SCALE_QUOTIENT_BITS, tail_bits=SCALE_QUOTIENT_BITS,
            bits_per_clock=self._bits_per_clock)
        # DIVIDEND / (t << 41): its top 24 bits in the remainder, 28 shifted in, the rest
        # (constant) only deciding whether the division is exact; c = mantissa * 2**(150 - 64
        # + dropped + 2 - field), once more for an order bit of 1.
        dropped = self.DIVIDEND.bit_length() - _T_BITS - SCALE_QUOTIENT_BITS
        dropped_nonzero = bool(self.DIVIDEND & ((1 << dropped) - 1))
        # Datapath, no reset (docs/timing.md, "The reset net").
        base = Signal(signed(9), reset_less=True)  # the exponent for an order bit of 0
        mantissa = Signal(SCALE_BITS, reset_less=True)
        exponent = Signal(signed(9), reset_less=True)
        m.d.comb += [self.response.payload.mantissa.eq(mantissa),
                     self.response.payload.exponent.eq(exponent)]

        with m.FSM(name="scale"):
            with m.State("IDLE"):
                m.d.comb += [self.request.ready.eq(1), divider.load.eq(self.request.valid),
                             divider.dividend.eq(self.DIVIDEND >> dropped),
                             divider.divisor.eq(Cat(self.request.payload[:23], 1))]
                with m.If(self.request.valid):
                    m.d.sync += base.eq(88 + dropped - self.request.payload[23:31])
                    m.next = "DIVIDE"
            with m.State("DIVIDE"):
                with m.If(divider.done):
                    quotient = divider.quotient
                    top = quotient[-1]
                    kept = Mux(top, quotient[1:], quotient[:-1])  # 26 bits and guard
                    sticky = divider.inexact | (top & quotient[0]) | dropped_nonzero
                    guard, truncated = kept[0], kept[1:]
                    rounded = truncated + (guard & (sticky | truncated[0]))
                        # All ones rounded up renormalise (never with log2(e): the golden's rule).
                    carry = truncated.all() & guard
                    m.d.sync += [mantissa.eq(Mux(carry, 1 << (SCALE_BITS - 1), rounded)),
                                 exponent.eq(base + (top + carry))]
                    m.next = "HOLD"
            _hold(m, self.response)
        return m
