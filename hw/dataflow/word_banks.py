"""An on-chip memory of 32-bit words written and read up to ``lanes`` consecutive words a clock
(a read beat's group, ``hw.lib.packer.group_layout``).

Word ``x`` lives in bank ``x % lanes`` at row ``x // lanes``: consecutive words fall in
different banks, so a group of up to ``lanes`` words from any position is one write per bank.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.packer import group_layout
from hw.lib.params import check_int, check_power_of_two, index_bits

__all__ = ["WordBanks"]


class WordBanks(wiring.Component):
    """Words written a group a clock, read ``lanes`` consecutive words a clock.

    Parameters
    ----------
    depth : int
        Words held.
    lanes : int, a power of two
        Most words a write; words a read.

    Members
    -------
    write_at : In(range(depth))
        Index of the group's first word.
    write : In(group_layout(32, lanes))
        ``count`` words from index 0.
    write_en : In(1)
    read_at : In(range(depth))
        Index of the first word read; the words are on ``read_group`` in the next clock.
    read_group : Out(data.ArrayLayout(32, lanes))
        Words ``read_at .. read_at + lanes - 1`` (those past ``depth`` unspecified).
    read_data : Out(32)
        Word ``read_at`` (``read_group[0]``).
    """

    def __init__(self, *, depth: int, lanes: int):
        self._depth = check_int("depth", depth, 1)
        self._lanes = check_power_of_two("lanes", lanes, 1, 32)
        super().__init__({
            "write_at": In(range(depth)), "write": In(group_layout(32, lanes)),
            "write_en": In(1), "read_at": In(range(depth)),
            "read_group": Out(data.ArrayLayout(32, lanes)), "read_data": Out(32),
        })

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def lanes(self) -> int:
        return self._lanes

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        rows = -(-self._depth // lanes)
        bits = index_bits(lanes) if lanes > 1 else 0
        first_bank = Signal(max(1, bits))  # the bank of the first word read a clock ago
        m.d.sync += first_bank.eq(self.read_at[:bits] if bits else 0)
        banks_out = []
        for bank in range(lanes):
            memory = m.submodules[f"bank{bank}"] = Memory(shape=32, depth=rows, init=[])
            reader, writer = memory.read_port(), memory.write_port()
            banks_out.append(reader.data)
            # the group's word that lands in (or is read from) this bank, and its index
            offset = Signal(max(1, bits), name=f"bank{bank}_offset")
            read_offset = Signal(max(1, bits), name=f"bank{bank}_read_offset")
            if bits:
                m.d.comb += [offset.eq(bank - self.write_at),  # (bank - write_at) mod lanes
                             read_offset.eq(bank - self.read_at)]
            m.d.comb += reader.addr.eq((self.read_at + read_offset) >> bits)
            index = Signal(range(self._depth + lanes), name=f"bank{bank}_index")
            m.d.comb += [index.eq(self.write_at + offset),
                         writer.addr.eq(index >> bits),
                         writer.data.eq(self.write.data.as_value().word_select(offset, 32)
                                        if lanes > 1 else self.write.data[0]),
                         writer.en.eq(self.write_en & (offset < self.write.count))]
        for k in range(lanes):  # word read_at + k is in bank (first_bank + k) mod lanes
            if lanes > 1:
                chosen = Signal(bits, name=f"read_bank{k}")
                m.d.comb += chosen.eq(first_bank + k)
                with m.Switch(chosen):
                    for bank, value in enumerate(banks_out):
                        with m.Case(bank):
                            m.d.comb += self.read_group[k].eq(value)
            else:
                m.d.comb += self.read_group[k].eq(banks_out[0])
        m.d.comb += self.read_data.eq(self.read_group[0])
        return m
