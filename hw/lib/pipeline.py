"""Building blocks for fixed-latency, clock-enabled pipelines.

A pipelined core in this project has an ``en`` input: when it is high every pipeline
register advances by one stage, when it is low the whole pipeline holds. A stream wrapper
(``hw.lib.stream.PipelineStream``) drives ``en`` from the output handshake, so a core never
needs to know about valid/ready itself.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value

#: Bits a table of ``count_leading_zeros`` looks up (one LUT6 a result bit).
_CLZ_GROUP = 6


def stage(m: Module, en: Value, value, *, name: str, reset_less: bool = False) -> Signal:
    """Register ``value`` into a new signal of the same shape, advancing when ``en`` is high.

    Parameters
    ----------
    m : Module
        Module the register is added to (synchronous domain ``sync``).
    en : Value
        Clock enable of the pipeline.
    value : value-like
        What the register captures.
    name : str
        Name of the register in the generated Verilog.
    reset_less : bool
        No reset: the register keeps its value through ``rst`` (its power-up value is still
        ``0``); see :func:`data_stage`.
    """
    value = Value.cast(value)
    register = Signal(value.shape(), name=name, reset_less=reset_less)
    with m.If(en):
        m.d.sync += register.eq(value)
    return register


def data_stage(m: Module, en: Value, value, *, name: str) -> Signal:
    """:func:`stage` for a datapath register: no reset (``reset_less``), so that the reset net
    reaches control state only (docs/timing.md, "The reset net"). For values that only matter
    beside a valid flag or a state that has a reset; a flag itself takes :func:`stage`."""
    return stage(m, en, value, name=name, reset_less=True)


def count_leading_zeros(value: Value) -> Value:
    """Number of leading zero bits of ``value`` (its width when it is zero), without adders.

    The result has ``len(value).bit_length()`` bits. Each group of 6 bits from the top looks
    its answer up in a table (the zeros above it plus its own: one LUT level a result bit),
    and a tree of 4-way priority multiplexers keeps the highest group holding a one (the lowest
    group's table gives the width for zero). A recursive split with an add of the upper
    half's width at every level put a carry chain behind each multiplexer (9 LUT levels and
    4 carry bits for the LFSR coin's 24 bits). The two halves are
    :func:`leading_zero_groups` and :func:`leading_zeros_from_groups`, for a register between.
    """
    return leading_zeros_from_groups(leading_zero_groups(value))


def leading_zero_groups(value: Value) -> list[tuple[Value, Value]]:
    """First half of :func:`count_leading_zeros`: per group of 6 bits from the top, whether it
    holds a one and the count if the first one is in it (a table lookup a result bit)."""
    value = Value.cast(value)
    width = len(value)
    shape = width.bit_length()
    groups = []
    for top in range(width, 0, -_CLZ_GROUP):
        bottom = max(top - _CLZ_GROUP, 0)
        chunk = value[bottom:top]
        table = Array(Const(width - bottom - v.bit_length(), shape)
                      for v in range(1 << len(chunk)))
        groups.append((chunk.any(), table[chunk]))
    return groups


def leading_zeros_from_groups(groups: list[tuple[Value, Value]]) -> Value:
    """Second half of :func:`count_leading_zeros`: the count of the highest group holding a
    one (the lowest group's for zero), 4-way priority multiplexers (two LUT levels each)."""
    while len(groups) > 1:
        merged = []
        for x in range(0, len(groups), 4):
            quad = groups[x:x + 4]
            count = quad[-1][1]
            for holds, value in reversed(quad[:-1]):
                count = Mux(holds, value, count)
            merged.append((Cat(holds for holds, _ in quad).any(), count))
        groups = merged
    return groups[0][1]


def shift_right_sticky(value: Value, amount: Value, *, max_shift: int) -> tuple[Value, Value]:
    """Logical right shift by ``amount`` that also reports whether any one bit was shifted out.

    ``amount`` values above ``max_shift`` behave like ``max_shift``, which must be at least the
    width of ``value`` so that such shifts leave zero (and a sticky bit if ``value`` was nonzero).
    Returns ``(shifted, sticky)``.
    """
    value = Value.cast(value)
    if max_shift < len(value):
        raise ValueError(f"`max_shift` must be at least the value width {len(value)}, "
                         f"not {max_shift}")
    # (Shifts of `max_shift` and more agree with those of the value's width, which leave
    # nothing: no clamp in front of the shifter. The sticky bit is each bit's compare with
    # the amount, ANDed and ORed; a mask shifted by a clamped amount took 9 LUT levels.)
    amount = Value.cast(amount)
    return value >> amount, (value & dropped_bits(amount, len(value))).any()


def dropped_bits(amount: Value, width: int) -> Value:
    """The ``width`` bits a right shift by ``amount`` drops, as a mask: bit ``x`` is set where
    ``x < amount`` (all of them for an amount of ``width`` or more). One compare a bit."""
    return Cat(*(Value.cast(amount) > x for x in range(width)))
