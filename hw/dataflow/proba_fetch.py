"""``draft_depth``'s top-K probabilities: every request's read at the command's start, on a
reader of their own (beside the sequencer's tokens on the ``read`` port), into on-chip banks,
the first request's into K1's registers as they arrive; another request's move from the banks
into the registers, ``lanes`` words a clock, while the request before it is sorted and updated
(docs/engine.md, "What is still slow")."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import index_bits

from .memory_ports import WordReader, read_port_signature
from .word_banks import WordBanks

__all__ = ["ProbaFetch"]


class ProbaFetch(wiring.Component):
    """The depth's probabilities read into banks (``start``), a request's then loaded into
    ``probas`` (``load``).

    Parameters
    ----------
    params : EngineParams
        The engine's build (its port, the batch, the most candidates ``max_candidates``).

    Members
    -------
    port : Out(read_port_signature(address_width, port_bits))
        Its reader's memory port.
    start : In(1)
        Begin a fetch (a one-clock pulse while ``fetching`` is low)...
    address : In(address_width)
    count : In(range(max_batch * max_candidates + 1))
        ... of ``count`` words from byte address ``address`` into the banks from word 0, the
        rest of a read beat a clock; the first ``first_count`` go into ``probas`` too (the
        first request's, loaded as they arrive).
    first_count : In(range(max_candidates + 1))
    fetching : Out(1)
        High from the clock after ``start`` until every word is in the banks.
    reader_busy : Out(1)
        Its reader is busy (the ``read`` port's counters).
    load : In(1)
        Begin a load (a one-clock pulse while ``loading`` is low, of words already fetched)...
    load_at : In(range(max_batch * max_candidates))
    load_count : In(range(max_candidates + 1))
        ... of the ``load_count`` words from word ``load_at`` of the banks into ``probas``.
    loading : Out(1)
        High from the clock after ``load`` until every word is in ``probas``.
    probas : Out(data.ArrayLayout(32, max_candidates))
        The words loaded, in order from entry 0 (the entries past ``load_count`` are
        unspecified).
    """

    def __init__(self, params):
        self._params = p = params
        words = p.max_batch * p.max_candidates
        super().__init__({
            "port": Out(read_port_signature(p.address_width, p.port_bits)),
            "start": In(1), "address": In(p.address_width), "count": In(range(words + 1)),
            "first_count": In(range(p.max_candidates + 1)),
            "fetching": Out(1), "reader_busy": Out(1),
            "load": In(1), "load_at": In(range(words)),
            "load_count": In(range(p.max_candidates + 1)), "loading": Out(1),
            "probas": Out(data.ArrayLayout(32, p.max_candidates)),
        })

    def elaborate(self, platform):
        p = self._params
        lanes = p.port_bits // 32
        bits = index_bits(lanes) if lanes > 1 else 0
        m = Module()
        m.submodules.reader = reader = WordReader(address_width=p.address_width,
                                                  port_bits=p.port_bits,
                                                  max_words=p.max_run_words)
        wiring.connect(m, reader.port, wiring.flipped(self.port))
        m.submodules.banks = banks = WordBanks(depth=p.max_batch * p.max_candidates,
                                               lanes=lanes)
        m.d.comb += [reader.start.eq(self.start), reader.address.eq(self.address),
                     reader.count.eq(self.count), self.reader_busy.eq(reader.busy)]

        # fetch: a read beat's group a clock into the banks (and the first request's words
        # into `probas`: word w of a group lands in entry written + w)
        written = Signal(range(p.max_batch * p.max_candidates + lanes))
        first_count = Signal.like(self.first_count)
        group = reader.group
        with m.If(self.start):
            m.d.sync += [self.fetching.eq(1), written.eq(0), first_count.eq(self.first_count)]
        with m.If(self.fetching):
            m.d.comb += [group.ready.eq(1), banks.write_at.eq(written),
                         banks.write.eq(group.payload), banks.write_en.eq(group.valid)]
            with m.If(group.valid):
                m.d.sync += written.eq(written + group.payload.count)
                for t in range(p.max_candidates):
                    at = t - written  # the word of the group that lands in entry t
                    with m.If((t >= written) & (at < group.payload.count) & (t < first_count)):
                        m.d.sync += self.probas[t].eq(group.payload.data.as_value().word_select(
                            at[:index_bits(lanes)] if lanes > 1 else 0, 32))
            with m.If(~reader.busy & ~group.valid):
                m.d.sync += self.fetching.eq(0)

        # load: `lanes` words a clock, entries `x .. x + lanes - 1` of `probas` from the
        # group read a clock before (x a multiple of lanes, so entry t takes word t % lanes)
        read = Signal(range(p.max_candidates + lanes))  # entries asked for
        landing = Signal(range(p.max_candidates + lanes))  # the entries of the group read out
        arriving = Signal()  # a group is on the banks' output
        at = Signal.like(self.load_at)
        count = Signal.like(self.load_count)
        m.d.comb += banks.read_at.eq(at + read)
        m.d.sync += arriving.eq(0)
        with m.If(self.load):
            m.d.sync += [self.loading.eq(1), read.eq(0), at.eq(self.load_at),
                         count.eq(self.load_count)]
        with m.Elif(self.loading):
            with m.If(read < count):
                m.d.sync += [read.eq(read + lanes), landing.eq(read), arriving.eq(1)]
            with m.Elif(~arriving):
                m.d.sync += self.loading.eq(0)
        with m.If(arriving):
            for t in range(p.max_candidates):
                with m.If((landing >> bits) == (t >> bits)):
                    m.d.sync += self.probas[t].eq(banks.read_group[t % lanes])
        return m
