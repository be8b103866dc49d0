"""K4's mask words as the bytes of the verify forward's ``tree_mask`` array.

The target model's tree attention reads the mask as bytes: one ``bool`` byte per element in
the FULL and QLEN_ONLY layouts, ``ceil(n/8)`` packed bytes per row in QLEN_ONLY_BITPACKING
(``golden.fused_tree_mask_operator``). ``MaskBytes`` takes K4's ``mask`` stream (rows as words
of ``mask_lanes`` bits, ``hw.kernels.tree_mask``) and the row width of the request the stream
is at, and produces the array's bytes packed four to a 32-bit word, little-endian, up to four
bytes a clock (a ``hw.lib.packer.Packer`` makes words of them); ``flush`` pads the last word
with zero bytes.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.kernels.tree_mask import TreeMaskParams
from hw.lib.packer import Packer
from hw.lib.params import check_int

__all__ = ["MaskBytes"]


class MaskBytes(wiring.Component):
    """Mask words in, the mask array's words out.

    Parameters
    ----------
    mask_lanes : int
        Bits per K4 mask word.
    max_columns : int
        Largest row width (columns of a FULL row: ``seq_len + n``).

    Members
    -------
    mask : In(stream.Signature(TreeMaskParams(mask_lanes=...).mask_layout))
        K4's mask words.
    columns : In(range(max_columns + 1))
        Columns of the rows now arriving (read when a row's first word is taken).
    packed : In(1)
        QLEN_ONLY_BITPACKING: a row is ``ceil(columns / 8)`` packed bytes (else one byte per
        column). Static during a command.
    flush : In(1)
        A pulse after the command's last row: the partial word (if any) goes out padded.
    words : Out(stream.Signature(32))
        The array's bytes, four per word, in order.
    """

    def __init__(self, *, mask_lanes=64, max_columns=1024):
        self._layout = TreeMaskParams(mask_lanes=mask_lanes).mask_layout
        self._lanes = mask_lanes
        self._max_columns = check_int("max_columns", max_columns, 1)
        super().__init__({
            "mask": In(stream.Signature(self._layout)),
            "columns": In(range(max_columns + 1)),
            "packed": In(1),
            "flush": In(1),
            "words": Out(stream.Signature(32)),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        m.submodules.packer = packer = Packer(unit_bits=8, in_units=4, out_units=4)
        bits = Signal(lanes, reset_less=True)  # the word being split into bytes
        position = Signal(range(lanes + 32))  # next bit of `bits` to emit
        in_word = Signal(range(lanes + 1))  # bits of `bits` that belong to the row
        row_left = Signal(range(self._max_columns + 1))  # row columns not yet taken
        have_word = Signal()
        flushing = Signal()

        # up to four bytes a clock out of the word into the packer, four bytes to a word
        left = Signal(range(lanes + 1))  # columns of the word not yet emitted
        count = Signal(range(5))
        m.d.comb += [left.eq(in_word - position),
                     count.eq(Mux(self.packed, Mux(left > 24, 4, (left + 7) >> 3),
                                  Mux(left > 4, 4, left)))]
        for index in range(4):
            m.d.comb += packer.i.payload.data[index].eq(
                Mux(self.packed, bits.bit_select(position + 8 * index, 8),
                    bits.bit_select(position + index, 1)))
        m.d.comb += [packer.i.valid.eq(have_word), packer.i.payload.count.eq(count)]
        step = Mux(self.packed, count << 3, count)
        spent = packer.i.ready & (position + step >= in_word)
        with m.If(packer.i.valid & packer.i.ready):
            m.d.sync += position.eq(position + step)
            with m.If(spent):
                m.d.sync += have_word.eq(0)
        m.d.comb += [self.words.valid.eq(packer.o.valid),
                     self.words.payload.eq(packer.o.payload.data),
                     packer.o.ready.eq(self.words.ready)]

        # `flush` waits for the last word's bytes, then the partial word (if any) goes out
        drained = flushing & ~have_word & ~self.mask.valid
        m.d.comb += packer.flush.eq(drained)
        with m.If(drained & packer.empty):
            m.d.sync += flushing.eq(0)
        with m.If(self.flush):
            m.d.sync += flushing.eq(1)

        # take the next mask word once this one is spent
        m.d.comb += self.mask.ready.eq(~have_word | spent)
        with m.If(self.mask.valid & self.mask.ready):
            columns = Mux(row_left == 0, self.columns, row_left)  # a row's first word
            take = Mux(columns > lanes, lanes, columns)
            m.d.sync += [bits.eq(self.mask.payload.bits), position.eq(0), in_word.eq(take),
                         have_word.eq(1),
                         row_left.eq(Mux(self.mask.payload.row_last, 0, columns - take))]
        return m
