"""Combinational building blocks: named wires, priority encoders, one-hot codes, OR and prefix-sum
trees.

Every helper that adds logic to a module names its signals after ``name``, so the generated
Verilog (and a waveform) shows where they come from.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value

from hw.lib.params import index_bits

__all__ = ["wire", "first_set", "lowest_set_bit", "lowest_one_hot", "one_hot_index", "at_least_two",
           "predecode", "one_hot", "or_tree", "prefix_sums"]


def wire(m: Module, value, *, name: str) -> Signal:
    """``value`` in a combinational signal called ``name``: an expression referenced more than
    once must be a signal, or every reference copies the whole expression tree into the
    netlist."""
    value = Value.cast(value)
    signal = Signal(value.shape(), name=name)
    m.d.comb += signal.eq(value)
    return signal


def first_set(m: Module, bits: list, *, name: str) -> tuple[Value, Value]:
    """``(any, index)`` of the lowest set bit of ``bits`` (a priority encoder; ``index`` is the
    signal ``<name>_index``, 0 when no bit is set)."""
    index = Signal(range(max(len(bits), 2)), name=f"{name}_index")
    for position in reversed(range(len(bits))):
        with m.If(bits[position]):
            m.d.comb += index.eq(position)
    return Cat(*bits).any(), index


def lowest_set_bit(value: Value) -> tuple[Value, Value]:
    """``(index, any)``: the index of the lowest set bit of ``value`` (0 when none), as a
    balanced tree (logarithmic depth), and whether any bit is set (combinational)."""
    value = Value.cast(value)
    width = len(value)
    if width == 1:
        return Const(0, 1), value[0]
    low_width = 1 << ((width - 1).bit_length() - 1)  # largest power of two below width
    low, high = value[:low_width], value[low_width:]
    low_index, low_any = lowest_set_bit(low)
    high_index, high_any = lowest_set_bit(high)
    bits = (low_width - 1).bit_length()  # the high index plus low_width, without an adder
    high_index = Cat(high_index, Const(0, bits))[:bits]
    index = Mux(low_any, low_index, Cat(high_index, Const(1, 1)))[:index_bits(width)]
    return index, low_any | high_any


def lowest_one_hot(value: Value) -> Value:
    """The lowest set bit of ``value`` alone (``value & -value``: one carry chain)."""
    value = Value.cast(value)
    return (value & -value)[:len(value)]


def one_hot_index(one_hot: Value, width: int) -> Value:
    """The index of the set bit of ``one_hot`` (``width`` bits; 0 when none), as OR trees."""
    one_hot = Value.cast(one_hot)
    return Cat(or_tree([Const(0, 1), *(one_hot[i] for i in range(len(one_hot)) if i >> b & 1)])
               for b in range(width))


def predecode(index: Value) -> Value:
    """The one-hot decodes of the low and the high half of ``index``, side by side."""
    index = Value.cast(index)
    half = len(index) // 2
    return Cat(*(index[:half] == i for i in range(1 << half)),
               *(index[half:] == i for i in range(1 << (len(index) - half))))


def one_hot(index: Value, width: int, predecoded: Value | None = None) -> Value:
    """``1 << index`` in ``width`` bits as an AND of the two halves' decodes (``predecoded``:
    ``predecode(index)``, if already at hand): the mapper otherwise shares a decode as chains
    of small LUTs."""
    index = Value.cast(index)
    half = len(index) // 2
    pre = predecode(index) if predecoded is None else predecoded
    return Cat(pre[(1 << half) + (j >> half)] & pre[j & ((1 << half) - 1)]
               for j in range(width))


def at_least_two(value: Value) -> Value:
    """Whether ``value`` has two or more bits set, as a balanced tree (no carry chain)."""
    def count(bits):  # (any, two or more)
        if len(bits) == 1:
            return bits[0], Const(0, 1)
        half = len(bits) // 2
        (low_any, low_two), (high_any, high_two) = count(bits[:half]), count(bits[half:])
        return low_any | high_any, low_two | high_two | (low_any & high_any)
    return count(Value.cast(value))[1]


def or_tree(values: list) -> Value:
    """Bitwise OR of ``values`` as a balanced tree (logarithmic depth)."""
    values = list(values)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def prefix_sums(m: Module, values: list, *, width: int, name: str) -> list:
    """Inclusive prefix sums of ``values``, ``width`` bits each (Kogge-Stone: logarithmic adder
    depth); level ``l``'s sums are the wires ``<name>_l<l>_<j>``."""
    sums = [wire(m, Value.cast(v) + Const(0, width), name=f"{name}_l0_{j}")
            for j, v in enumerate(values)]
    distance, level = 1, 1
    while distance < len(sums):
        sums = [wire(m, (sums[j] + sums[j - distance])[:width], name=f"{name}_l{level}_{j}")
                if j >= distance else sums[j] for j in range(len(sums))]
        distance *= 2
        level += 1
    return sums
