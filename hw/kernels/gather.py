"""Streaming hidden-state gather of K1 (docs/kernels.md §2 step 4): where the bytes move.

``output_hidden_states[b,k,:] = input_hidden_states[b, parent, :]`` is a row copy. The score
and sort pipeline (``hw.kernels.score``) only emits the parent index; this unit turns a stream
of source row numbers into word reads on a memory read port and streams the returned words
out, ``lanes`` elements per clock.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.stream import RegisterSlice, packet_layout

__all__ = ["HiddenStateGather"]


class HiddenStateGather(wiring.Component):
    """Copies one hidden-state row per ``rows`` item from a memory read port to ``o``.

    Memory model: ``input_hidden_states`` ([B, W, H], row ``r = b*W + w``) is stored as words
    of ``lanes`` elements, every row starting on a word: row ``r`` occupies the word addresses
    ``r*R .. r*R + R-1`` with ``R = ceil(H / lanes)`` (lane ``l`` of word ``i`` is element
    ``i*lanes + l``; the lanes of the last word past ``H`` are padding). Addresses are relative
    to the buffer: the memory adapter adds its base.

    For every row number taken from ``rows`` the unit issues the ``R`` word addresses on
    ``read_address``, one per clock, and forwards the words of ``read_data`` (answered in
    request order, after any latency, with back-pressure both ways) to ``o``; ``o.first`` and
    ``o.last`` mark the first and last word of each row. There is no bubble between rows, so
    with a memory that answers one word per clock a row takes ``R`` clocks and a K1 request
    (``K`` rows) ``K * ceil(H / lanes)`` clocks. ``hidden_size = 0`` consumes rows and emits
    nothing.

    Parameters
    ----------
    element_width : int
        Bits per element: 32 for float32, 16 for float16/bfloat16 (copied bit for bit).
    lanes : int
        Elements per memory word and per output beat, a power of two.
    max_hidden_size : int
        Largest supported ``H``.
    address_width : int
        Bits of row numbers and word addresses.

    Members
    -------
    hidden_size : In(range(max_hidden_size + 1))
        ``H``, static: change it only while the unit is idle.
    rows : In(stream.Signature(address_width))
        Source row numbers ``b*W + parent``, one per selected child.
    read_address : Out(stream.Signature(address_width))
        Word addresses of the read port.
    read_data : In(stream.Signature(ArrayLayout(element_width, lanes)))
        Words, in address order.
    o : Out(stream.Signature(packet_layout({"data": ArrayLayout(element_width, lanes)})))
        The copied rows, ``R`` beats each; ``first``/``last`` delimit a row.
    """

    def __init__(self, *, element_width: int = 32, lanes: int = 8, max_hidden_size: int = 8192,
                 address_width: int = 32, src_loc_at: int = 0):
        for name, value in (("element_width", element_width), ("lanes", lanes),
                            ("max_hidden_size", max_hidden_size),
                            ("address_width", address_width)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, not {value!r}")
        if lanes & (lanes - 1):
            raise ValueError(f"`lanes` must be a power of two, not {lanes}")
        self._element_width = element_width
        self._lanes = lanes
        self._max_hidden_size = max_hidden_size
        self._address_width = address_width
        self._word_layout = data.ArrayLayout(element_width, lanes)
        self._output_layout = packet_layout({"data": self._word_layout})
        super().__init__({
            "hidden_size": In(range(max_hidden_size + 1)),
            "rows": In(stream.Signature(address_width)),
            "read_address": Out(stream.Signature(address_width)),
            "read_data": In(stream.Signature(self._word_layout)),
            "o": Out(stream.Signature(self._output_layout)),
        }, src_loc_at=src_loc_at)

    @property
    def element_width(self):
        return self._element_width

    @property
    def lanes(self):
        return self._lanes

    @property
    def max_hidden_size(self):
        return self._max_hidden_size

    @property
    def address_width(self):
        return self._address_width

    @property
    def word_layout(self):
        return self._word_layout

    @property
    def output_layout(self):
        return self._output_layout

    def words_per_row(self, hidden_size: int) -> int:
        """``R = ceil(H / lanes)``: memory words (and output beats) per row."""
        return -(-hidden_size // self._lanes)

    def elaborate(self, platform):
        m = Module()
        shift = self._lanes.bit_length() - 1
        words = Signal(range(self.words_per_row(self._max_hidden_size) + 1))
        m.d.comb += words.eq((self.hidden_size + self._lanes - 1) >> shift)

        # Address side: one word address per clock, the next row loads on the last word.
        busy = Signal()
        row_base = Signal(self._address_width)
        word = Signal.like(words)
        last_word = word == words - 1
        m.d.comb += [
            self.read_address.valid.eq(busy),
            self.read_address.payload.eq(row_base + word),
            self.rows.ready.eq(~busy | (self.read_address.ready & last_word)),
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
        m.submodules.output_slice = out = RegisterSlice(self._output_layout)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        out_word = Signal.like(words)
        out_last = out_word == words - 1
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
