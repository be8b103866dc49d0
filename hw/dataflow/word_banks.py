"""An on-chip memory of 32-bit words written up to ``lanes`` consecutive words a clock (a read
beat's group, ``hw.lib.packer.group_layout``) and read a word a clock.

Word ``x`` lives in bank ``x % lanes`` at row ``x // lanes``: consecutive words fall in
different banks, so a group of up to ``lanes`` words from any position is one write per bank.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.packer import group_layout
from hw.lib.params import check_int, check_power_of_two, index_bits

__all__ = ["WordBanks"]


class WordBanks(wiring.Component):
    """Words written a group a clock, read a word a clock.

    Parameters
    ----------
    depth : int
        Words held.
    lanes : int, a power of two
        Most words a write.

    Members
    -------
    write_at : In(range(depth))
        Index of the group's first word.
    write : In(group_layout(32, lanes))
        ``count`` words from index 0.
    write_en : In(1)
    read_at : In(range(depth))
        Index of the word read; its value is on ``read_data`` in the next clock.
    read_data : Out(32)
    """

    def __init__(self, *, depth: int, lanes: int):
        self._depth = check_int("depth", depth, 1)
        self._lanes = check_power_of_two("lanes", lanes, 1, 32)
        super().__init__({
            "write_at": In(range(depth)), "write": In(group_layout(32, lanes)),
            "write_en": In(1), "read_at": In(range(depth)), "read_data": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        rows = -(-self._depth // lanes)
        bits = index_bits(lanes) if lanes > 1 else 0
        read_bank = Signal(max(1, bits))  # the bank of the word read a clock ago
        m.d.sync += read_bank.eq(self.read_at[:bits] if bits else 0)
        banks_out = []
        for bank in range(lanes):
            memory = m.submodules[f"bank{bank}"] = Memory(shape=32, depth=rows, init=[])
            reader, writer = memory.read_port(), memory.write_port()
            m.d.comb += reader.addr.eq(self.read_at >> bits)
            banks_out.append(reader.data)
            # the group's word that lands in this bank, and its index
            offset = Signal(max(1, bits), name=f"bank{bank}_offset")
            if bits:
                m.d.comb += offset.eq(bank - self.write_at)  # (bank - write_at) mod lanes
            index = Signal(range(self._depth + lanes), name=f"bank{bank}_index")
            m.d.comb += [index.eq(self.write_at + offset),
                         writer.addr.eq(index >> bits),
                         writer.data.eq(self.write.data.as_value().word_select(offset, 32)
                                        if lanes > 1 else self.write.data[0]),
                         writer.en.eq(self.write_en & (offset < self.write.count))]
        if lanes > 1:
            with m.Switch(read_bank):
                for bank, value in enumerate(banks_out):
                    with m.Case(bank):
                        m.d.comb += self.read_data.eq(value)
        else:
            m.d.comb += self.read_data.eq(banks_out[0])
        return m
