"""Combinational building blocks: named wires, a priority encoder, OR and prefix-sum trees.

Every helper that adds logic to a module names its signals after ``name``, so the generated
Verilog (and a waveform) shows where they come from.
"""

from amaranth.hdl import Cat, Const, Module, Signal, Value

__all__ = ["wire", "first_set", "or_tree", "prefix_sums"]


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
