"""``draft_depth``'s top-K probabilities into registers, read on a reader of their own (beside
the sequencer's on the ``read`` port) so that a request's are read while the tokens stream in
or the previous request is sorted and updated (docs/engine.md, "What is still slow")."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import index_bits

from .memory_ports import WordReader, read_port_signature

__all__ = ["ProbaFetch"]


class ProbaFetch(wiring.Component):
    """A request's ``count`` top-K probabilities read into ``probas``, the rest of a read beat
    a clock.

    Parameters
    ----------
    params : EngineParams
        The engine's build (its port, the most candidates ``max_candidates``).

    Members
    -------
    port : Out(read_port_signature(address_width, port_bits))
        Its reader's memory port.
    start : In(1)
        Begin a fetch (a one-clock pulse while ``fetching`` is low)...
    address : In(address_width)
    count : In(range(max_candidates + 1))
        ... of ``count`` words from byte address ``address``.
    fetching : Out(1)
        High from the clock after ``start`` until every word is in ``probas``.
    reader_busy : Out(1)
        Its reader is busy (the ``read`` port's counters).
    probas : Out(data.ArrayLayout(32, max_candidates))
        The words fetched, in order from entry 0 (the entries past ``count`` keep theirs).
    """

    def __init__(self, params):
        self._params = p = params
        super().__init__({
            "port": Out(read_port_signature(p.address_width, p.port_bits)),
            "start": In(1), "address": In(p.address_width),
            "count": In(range(p.max_candidates + 1)),
            "fetching": Out(1), "reader_busy": Out(1),
            "probas": Out(data.ArrayLayout(32, p.max_candidates)),
        })

    def elaborate(self, platform):
        p = self._params
        m = Module()
        m.submodules.reader = reader = WordReader(address_width=p.address_width,
                                                  port_bits=p.port_bits,
                                                  max_words=p.max_run_words)
        wiring.connect(m, reader.port, wiring.flipped(self.port))
        m.d.comb += [reader.start.eq(self.start), reader.address.eq(self.address),
                     reader.count.eq(self.count), self.reader_busy.eq(reader.busy)]
        index = Signal(range(p.max_candidates + 1))  # the next word's entry
        group = reader.group
        with m.If(self.start):
            m.d.sync += [self.fetching.eq(1), index.eq(0)]
        with m.If(self.fetching):
            m.d.comb += group.ready.eq(1)
            with m.If(group.valid):
                for t in range(p.max_candidates):
                    at = t - index  # the word of the group that lands in entry t
                    with m.If((t >= index) & (at < group.payload.count)):
                        m.d.sync += self.probas[t].eq(group.payload.data.as_value().word_select(
                            at[:index_bits(len(group.payload.data))], 32))
                m.d.sync += index.eq(index + group.payload.count)
            with m.If(~reader.busy & ~group.valid):
                m.d.sync += self.fetching.eq(0)
        return m
