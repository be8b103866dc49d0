"""Hot-token remap of K1 (docs/kernels.md §2 step 2): ``token = hot_token_id[token]``.

``HotTokenRemap`` looks token ids up in an on-chip table, ``remap_lanes`` ids per clock;
``TokenRemapParams`` holds its validated build parameters and port layouts. Design notes:
docs/decisions.md, "K1 hardware" (token remap throughput).
"""

from dataclasses import dataclass
from functools import cached_property

from amaranth.hdl import Cat, Module, Mux, signed
from amaranth.lib import data
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from hw.lib.bitonic import delay
from hw.lib.component import KernelComponent
from hw.lib.params import ParameterRecord, parameter
from hw.lib.stream import packet_layout, stalling_handshake

__all__ = ["TokenRemapParams", "HotTokenRemap"]


@dataclass(frozen=True)
class TokenRemapParams(ParameterRecord):
    """Validated build parameters of :class:`HotTokenRemap` and its port layouts."""

    hot_vocab_size: int = parameter(32768, "Table capacity: the largest ``V_hot``.")
    remap_lanes: int = parameter(8, "Ids looked up per clock, i.e. read ports.")
    token_width: int = parameter(
        32, "Bits of a token id and a table entry, signed. The host refuses ids or table "
            "entries outside that range.", lo=2, hi=64)

    @cached_property
    def table_layout(self) -> data.StructLayout:
        """``table``: ``{address, value}``, ``hot_token_id[address] = value``."""
        return data.StructLayout({"address": range(self.hot_vocab_size),
                                  "value": signed(self.token_width)})

    @cached_property
    def token_layout(self) -> data.StructLayout:
        """``i``: ``{tokens: remap_lanes x signed(token_width), enable, first, last}``."""
        return packet_layout({"tokens": data.ArrayLayout(signed(self.token_width),
                                                         self.remap_lanes),
                              "enable": 1})

    @cached_property
    def remapped_layout(self) -> data.StructLayout:
        """``o``: ``{tokens, first, last}``."""
        return packet_layout({"tokens": data.ArrayLayout(signed(self.token_width),
                                                         self.remap_lanes)})

    @property
    def ports(self) -> dict:
        """Port name -> payload layout (stream ports)."""
        return {"table": self.table_layout, "i": self.token_layout, "o": self.remapped_layout}


class HotTokenRemap(KernelComponent):
    """Step 2 of K1: ``token = hot_token_id[token]`` for ids in ``[0, table_size)``.

    The table is an ``amaranth.lib.memory.Memory`` of ``hot_vocab_size`` entries with one
    write port (``table``, always ready) and one transparent read port per lane. An id outside
    ``[0, table_size)``, or any id of a beat whose ``enable`` is low (``use_hot_token_id``
    false), passes unchanged. A batch's ``B*N`` ids (row-major) travel as
    ``ceil(B*N / remap_lanes)`` beats; the lanes of the last beat past the end are don't-care.
    One beat per clock, ``latency`` 2; a table write accepted in the same clock as a token
    beat, or earlier, is seen by its lookups.

    Parameters
    ----------
    hot_vocab_size, remap_lanes, token_width
        The fields of :class:`TokenRemapParams`.

    Members
    -------
    table_size : In(range(hot_vocab_size + 1))
        ``V_hot``, static while tokens are in flight.
    table : In(stream.Signature(params.table_layout))
    i : In(stream.Signature(params.token_layout))
    o : Out(stream.Signature(params.remapped_layout))
    """

    Params = TokenRemapParams
    OUTPUTS = ("o",)
    latency = 2

    def members(self, params) -> dict:
        return {"table_size": In(range(params.hot_vocab_size + 1)), **super().members(params)}

    def elaborate(self, platform):
        m = Module()
        params = self._params
        m.submodules.table = table = Memory(shape=signed(params.token_width),
                                            depth=params.hot_vocab_size, init=[])
        write = table.write_port()
        m.d.comb += [
            self.table.ready.eq(1),
            write.en.eq(self.table.valid),
            write.addr.eq(self.table.payload.address),
            write.data.eq(self.table.payload.value),
        ]
        en = stalling_handshake(m, latency=self.latency, source=self.i, sink=self.o)
        beat = self.i.payload
        for lane in range(params.remap_lanes):
            token = beat.tokens[lane]
            read = table.read_port(transparent_for=(write,))
            m.d.comb += [read.en.eq(en), read.addr.eq(token[:len(read.addr)])]
            hit = delay(m, en, beat.enable & (token >= 0) & (token < self.table_size), 1,
                        name=f"hit{lane}")
            token_1 = delay(m, en, token, 1, name=f"token{lane}")
            m.d.comb += self.o.payload.tokens[lane].eq(
                delay(m, en, Mux(hit, read.data, token_1), 1, name=f"remapped{lane}"))
        m.d.comb += Cat(self.o.payload.first, self.o.payload.last).eq(
            delay(m, en, Cat(beat.first, beat.last), self.latency, name="marks"))
        return m
