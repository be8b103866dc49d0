"""Streaming hidden-state gather of K1 (docs/kernels.md §2 step 4): where the bytes move.

``output_hidden_states[b,k,:] = input_hidden_states[b, parent, :]`` is a row copy.
``HiddenStateGather`` turns a stream of source row numbers into word reads on a memory read
port and streams the returned words out, ``lanes`` elements per clock; ``GatherParams`` holds
its validated build parameters and port layouts.
"""

from dataclasses import dataclass
from functools import cached_property

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.component import KernelComponent
from hw.lib.params import ParameterRecord, parameter
from hw.lib.stream import RegisterSlice, packet_layout

__all__ = ["GatherParams", "HiddenStateGather"]


@dataclass(frozen=True)
class GatherParams(ParameterRecord):
    """Validated build parameters of :class:`HiddenStateGather` and its port layouts."""

    element_width: int = parameter(
        32, "Bits per element: 32 for float32, 16 for float16/bfloat16 (copied bit for bit).")
    lanes: int = parameter(8, "Elements per memory word and per output beat.",
                           power_of_two=True)
    max_hidden_size: int = parameter(8192, "Largest supported ``H``.")
    address_width: int = parameter(32, "Bits of row numbers and word addresses.")

    def words_per_row(self, hidden_size: int) -> int:
        """``R = ceil(H / lanes)``: memory words (and output beats) per row."""
        return -(-hidden_size // self.lanes)

    @cached_property
    def word_layout(self) -> data.ArrayLayout:
        """A memory word: ``lanes`` elements, lane ``l`` of word ``i`` is element
        ``i*lanes + l``."""
        return data.ArrayLayout(self.element_width, self.lanes)

    @cached_property
    def output_layout(self) -> data.StructLayout:
        """``o``: ``{data: word_layout, first, last}`` (a row is a packet)."""
        return packet_layout({"data": self.word_layout})

    @cached_property
    def address_layout(self) -> data.StructLayout:
        """The payload of ``rows`` and ``read_address`` (a bare ``address_width``-bit
        unsigned integer on the ports) as a one-field layout, for packing and width checks."""
        return data.StructLayout({"address": unsigned(self.address_width)})

    @property
    def ports(self) -> dict:
        """Port name -> payload layout (stream ports)."""
        return {"rows": self.address_layout, "read_address": self.address_layout,
                "read_data": self.word_layout, "o": self.output_layout}


class HiddenStateGather(KernelComponent):
    """Copies one hidden-state row per ``rows`` item from a memory read port to ``o``.

    Memory model: ``input_hidden_states`` ([B, W, H], row ``r = b*W + w``) is stored as words
    of ``lanes`` elements, every row starting on a word: row ``r`` occupies the word addresses
    ``r*R .. r*R + R-1`` with ``R = ceil(H / lanes)`` (the lanes of the last word past ``H``
    are padding). Addresses are relative to the buffer: the memory adapter adds its base.

    For every row number taken from ``rows`` the unit issues the ``R`` word addresses on
    ``read_address``, one per clock, and forwards the words of ``read_data`` (answered in
    request order, after any latency, with back-pressure both ways) to ``o``; ``o.first`` and
    ``o.last`` mark the first and last word of each row. No bubble between rows: with a memory
    answering one word per clock a row takes ``R`` clocks. ``hidden_size = 0`` consumes rows
    and emits nothing.

    Parameters
    ----------
    element_width, lanes, max_hidden_size, address_width
        The fields of :class:`GatherParams`.

    Members
    -------
    hidden_size : In(range(max_hidden_size + 1))
        ``H``, static: change it only while the unit is idle (it is registered: the next row
        may follow a clock later; ``rows`` is not ready in the first clock after reset).
    rows : In(stream.Signature(address_width))
        Source row numbers ``b*W + parent``, one per selected child.
    read_address : Out(stream.Signature(address_width))
        Word addresses of the read port.
    read_data : In(stream.Signature(params.word_layout))
        Words, in address order.
    o : Out(stream.Signature(params.output_layout))
        The copied rows, ``R`` beats each; ``first``/``last`` delimit a row.
    """

    Params = GatherParams

    def members(self, params) -> dict:
        # `rows` and `read_address` carry bare integers (`address_layout` describes them).
        return {
            "hidden_size": In(range(params.max_hidden_size + 1)),
            "rows": In(stream.Signature(params.address_width)),
            "read_address": Out(stream.Signature(params.address_width)),
            "read_data": In(stream.Signature(params.word_layout)),
            "o": Out(stream.Signature(params.output_layout)),
        }

    def words_per_row(self, hidden_size: int) -> int:
        """``R = ceil(H / lanes)``: memory words (and output beats) per row."""
        return self._params.words_per_row(hidden_size)

    def elaborate(self, platform):
        m = Module()
        params = self._params
        shift = params.lanes.bit_length() - 1
        # The row length and its last word index, registered: `hidden_size` is static, and
        # the compares with the word counters then start from flip-flops.
        words = Signal(range(params.words_per_row(params.max_hidden_size) + 1))
        last_index = Signal(range(-1, params.words_per_row(params.max_hidden_size)))
        words_now = (self.hidden_size + params.lanes - 1) >> shift
        m.d.sync += [words.eq(words_now), last_index.eq(words_now - 1)]
        # They hold `hidden_size`'s values from the clock after reset on: no row before that.
        primed = Signal()
        m.d.sync += primed.eq(1)

        # Address side: one word address per clock, the next row loads on the last word.
        busy = Signal()
        row_base = Signal(params.address_width)
        word = Signal.like(words)
        last_word = word == last_index
        m.d.comb += [
            self.read_address.valid.eq(busy),
            self.read_address.payload.eq(row_base + word),
            self.rows.ready.eq(primed & (~busy | (self.read_address.ready & last_word))),
        ]
        with m.If(self.rows.valid & self.rows.ready):
            m.d.sync += [
                row_base.eq(self.rows.payload * words),
                word.eq(0),
                busy.eq(words != 0),
            ]
        with m.Elif(self.read_address.valid & self.read_address.ready):
            with m.If(last_word):
                m.d.sync += busy.eq(0)
            with m.Else():
                m.d.sync += word.eq(word + 1)

        # Data side: words pass in order; a counter marks the row boundaries.
        m.submodules.output_slice = out = RegisterSlice(params.output_layout)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        out_word = Signal.like(words)
        out_last = out_word == last_index
        m.d.comb += [
            out.i.valid.eq(self.read_data.valid),
            self.read_data.ready.eq(out.i.ready),
            out.i.payload.data.eq(self.read_data.payload),
            out.i.payload.first.eq(out_word == 0),
            out.i.payload.last.eq(out_last),
        ]
        with m.If(out.i.valid & out.i.ready):
            m.d.sync += out_word.eq(out_word + 1)
            with m.If(out_last):
                m.d.sync += out_word.eq(0)
        return m
