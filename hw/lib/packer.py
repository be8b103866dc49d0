"""Groups of a variable number of units in, whole groups of a fixed number out.

``Packer`` is the gearbox between a producer that has a few units at a time (a tree record's
words, a mask word's bytes, a memory beat's words after an unaligned start) and a consumer that
takes a fixed number per transfer (a memory port's beat, a 32-bit word of bytes).
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import check_int, index_bits

__all__ = ["Packer", "group_layout"]


def group_layout(unit_bits: int, units: int) -> data.StructLayout:
    """Up to ``units`` units of ``unit_bits`` bits: ``data`` (unit ``k`` at index ``k``) and
    ``count``, how many of them (from index 0) the transfer carries."""
    return data.StructLayout({"data": data.ArrayLayout(unit_bits, units),
                              "count": range(units + 1)})


class Packer(wiring.Component):
    """Pack groups of 1..``in_units`` units into groups of exactly ``out_units``, in order.

    Units go into a buffer of ``2 * out_units + in_units`` units at its fill position; an
    output group leaves from its bottom as soon as ``out_units`` are in (or, with ``flush``,
    whatever is in). The input is taken whenever the buffer has room for a whole input group;
    its ``ready`` does not depend on ``o.ready``, and the spare ``out_units`` of room let a
    group in while a full one waits to leave: with ``o.ready`` high, up to
    ``min(in_units, out_units)`` units a clock pass.

    Positions the input has not written are zero, so a flushed group is padded with zero units.

    Parameters
    ----------
    unit_bits : int
        Bits per unit.
    in_units : int, at least 1
        Most units per input transfer.
    out_units : int, at least 1
        Units per output transfer.

    Members
    -------
    i : In(stream.Signature(group_layout(unit_bits, in_units)))
        Input groups; ``count`` is 1..``in_units`` (a transfer with 0 is taken and adds nothing).
    o : Out(stream.Signature(group_layout(unit_bits, out_units)))
        Output groups of ``out_units`` units; ``count`` is ``out_units`` except in a flushed
        group, where it says how many positions were written (from the bottom).
    enables : Out(out_units)
        Which of ``o``'s positions hold units (the bottom ones below ``start``'s ``offset`` do
        not); valid with ``o``.
    start : In(1)
        Empty the buffer and put the next unit at position ``offset`` of the first output group
        (the others below it stay empty). Only while the buffer is empty.
    offset : In(range(out_units))
        With ``start``.
    flush : In(1)
        While high, the units in the buffer below ``out_units`` leave as a group (padded).
    empty : Out(1)
        No unit waits in the buffer.
    """

    def __init__(self, *, unit_bits: int, in_units: int, out_units: int):
        self._unit_bits = check_int("unit_bits", unit_bits, 1)
        self._in_units = check_int("in_units", in_units, 1)
        self._out_units = check_int("out_units", out_units, 1)
        super().__init__({
            "i": In(stream.Signature(group_layout(unit_bits, in_units))),
            "o": Out(stream.Signature(group_layout(unit_bits, out_units))),
            "enables": Out(out_units),
            "start": In(1),
            "offset": In(range(out_units)),
            "flush": In(1),
            "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bits, G, L = self._unit_bits, self._in_units, self._out_units
        size = 2 * L + G
        # The units are datapath (``held`` says which mean something): no reset.
        units = [Signal(bits, name=f"unit{p}", reset_less=True) for p in range(size)]
        held = Signal(size)  # which positions hold a unit
        fill = Signal(range(size + 1))  # the next unit's position

        full = fill >= L
        partial = self.flush & held[:L].any()
        m.d.comb += [self.o.valid.eq(full | partial),
                     self.o.payload.count.eq(Mux(full, L, fill)),
                     self.enables.eq(held[:L]),
                     self.empty.eq(~held.any())]
        for p in range(L):
            m.d.comb += self.o.payload.data[p].eq(units[p])
        leaving = self.o.valid & self.o.ready
        # after the group that leaves this clock: the buffer shifted down by L
        base = Signal.like(fill)
        m.d.comb += base.eq(Mux(leaving, Mux(full, fill - L, 0), fill))
        m.d.comb += self.i.ready.eq(fill <= 2 * L)
        taken = self.i.valid & self.i.ready
        count = self.i.payload.count

        for p in range(size):
            below = p + L < size
            shifted_unit = units[p + L] if below else 0
            shifted_held = held[p + L] if below else 0
            kept_unit = Mux(leaving, shifted_unit, units[p])
            kept_held = Mux(leaving, shifted_held, held[p])
            at = Signal(range(-size, size + 1), name=f"at{p}")  # input index for position p
            m.d.comb += at.eq(p - base)
            written = taken & (at >= 0) & (at < count)
            m.d.sync += [units[p].eq(Mux(written, self.i.payload.data.as_value().word_select(
                             at[:index_bits(G)], bits) if G > 1
                             else self.i.payload.data[0], kept_unit)),
                         held[p].eq(written | kept_held)]
        m.d.sync += fill.eq(base + Mux(taken, count, 0))
        with m.If(self.start):
            m.d.sync += [fill.eq(self.offset), held.eq(0), Cat(units).eq(0)]
        return m
