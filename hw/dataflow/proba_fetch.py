"""``draft_depth``'s top-K probabilities into the engine's ``probas`` registers, read on a
reader of their own (``proba_reader``, beside the sequencer's ``reader`` on the ``read`` port)
so that a request's are read while the tokens stream in or the previous request is sorted and
updated (docs/engine.md, "What is still slow")."""

from hw.lib.params import index_bits

__all__ = ["fetch_probas", "store_fetched_probas"]


def fetch_probas(m, c, *, request, count=None):
    """Start the read of ``request``'s top-K probabilities (``count``: ``n`` of its register
    unless given), stored by :func:`store_fetched_probas`. Only while ``c.fetching`` is low.

    ``c`` holds the engine's shared signals, memories and kernels (``PersistentEngine.elaborate``).
    """
    count = c.n if count is None else count
    m.d.comb += [c.proba_reader.start.eq(1), c.proba_reader.count.eq(count),
                 c.proba_reader.address.eq(c.cmd.address0 + 4 * (request * count))]
    m.d.sync += [c.fetching.eq(1), c.proba_index.eq(0)]


def store_fetched_probas(m, c):
    """Outside the sequencer's states: while a probabilities read runs (started by
    :func:`fetch_probas` in whatever state), its words go into ``c.probas``, the rest of a beat
    a clock; ``c.fetching`` falls when the run is over."""
    group = c.proba_reader.group
    with m.If(c.fetching):
        m.d.comb += group.ready.eq(1)
        with m.If(group.valid):
            for t in range(c.NM):
                at = t - c.proba_index  # the word of the group that lands in probas[t]
                with m.If((t >= c.proba_index) & (at < group.payload.count)):
                    m.d.sync += c.probas[t].eq(group.payload.data.as_value().word_select(
                        at[:index_bits(len(group.payload.data))], 32))
            m.d.sync += c.proba_index.eq(c.proba_index + group.payload.count)
        with m.If(~c.proba_reader.busy & ~group.valid):
            m.d.sync += c.fetching.eq(0)
