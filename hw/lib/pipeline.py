"""Building blocks for fixed-latency, clock-enabled pipelines.

A pipelined core in this project has an ``en`` input: when it is high every pipeline
register advances by one stage, when it is low the whole pipeline holds. A stream wrapper
(``hw.lib.stream.PipelineStream``) drives ``en`` from the output handshake, so a core never
needs to know about valid/ready itself.
"""

from amaranth.hdl import Const, Module, Mux, Signal, Value


def stage(m: Module, en: Value, value, *, name: str) -> Signal:
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
    """
    value = Value.cast(value)
    register = Signal(value.shape(), name=name)
    with m.If(en):
        m.d.sync += register.eq(value)
    return register


def count_leading_zeros(value: Value) -> Value:
    """Number of leading zero bits of ``value`` (its width when it is zero), as a balanced tree.

    The result has ``len(value).bit_length()`` bits. Depth is logarithmic in the width, unlike
    a priority chain, which matters for the wide normalisation shifters of the float cores.
    """
    value = Value.cast(value)
    width = len(value)
    if width == 1:
        return ~value[0]
    high_width = (width + 1) // 2
    high, low = value[width - high_width:], value[:width - high_width]
    high_zeros = count_leading_zeros(high)
    low_zeros = count_leading_zeros(low)
    return Mux(high.any(), high_zeros, high_width + low_zeros)[:width.bit_length()]


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
    clamped = Mux(amount > max_shift, max_shift, amount)[:max_shift.bit_length()]
    shifted = value >> clamped
    kept_mask = (Const((1 << len(value)) - 1, len(value)) << clamped)[:len(value)]
    sticky = (value & ~kept_mask).any()
    return shifted, sticky
