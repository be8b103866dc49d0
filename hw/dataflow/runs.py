"""Sequencer steps shared by the engine's commands: a read run's words into on-chip memories,
an on-chip memory's words into a write run, and the address of a ``req_to_token`` row."""

from amaranth.hdl import Mux, Signal

from hw.lib.params import index_bits

__all__ = ["copy_words", "copy_group", "store_group_run", "verify_locs_states", "table_address",
           "TABLE_ADDRESS_LATENCY", "TABLE_READY"]

#: Clocks from a ``table_address`` input to its output (see there).
TABLE_ADDRESS_LATENCY = 2
#: The caller's sub-step at which a table row's address is ready when the row's pool and
#: seq_len are addressed from sub-step 0 on (out of their memories a clock later).
TABLE_READY = 1 + TABLE_ADDRESS_LATENCY


def _copy(m, *, step, at, index, count, size, port, read_at, payload):
    """The steps of :func:`copy_words` and :func:`copy_group`: ``size`` words a transfer on
    ``port`` (``payload``: the statements that fill it), the memory addressed by
    ``read_at(x)`` (statements) for word ``x`` a clock ahead."""
    sending = step == at + 1
    m.d.comb += read_at(index + Mux(port.ready & sending, size, 0))
    done = Signal()
    with m.If(step == at):
        m.d.sync += step.eq(at + 1)
    with m.Elif(index == count):
        m.d.comb += done.eq(1)
    with m.Else():
        m.d.comb += [port.valid.eq(1), *payload]
        with m.If(port.ready):
            m.d.sync += index.eq(index + size)
    return done


def copy_words(m, *, step, at, index, count, read, address, writer):
    """Stream ``count`` words of an on-chip memory into ``writer``'s run, one per clock.

    Word ``x`` is at ``address(x)`` of the read port ``read``, which is read a clock ahead.
    ``step`` is the caller's sub-state counter: at ``at`` the first word is fetched (``index``
    must be 0), from ``at + 1`` on the words go out, ``index`` counting them. Returns a signal
    that is high once all ``count`` are taken; the caller then moves on.
    """
    return _copy(m, step=step, at=at, index=index, count=count, size=1, port=writer.words,
                 read_at=lambda x: read.addr.eq(address(x)),
                 payload=[writer.words.payload.eq(read.data)])


def store_group_run(m, c, *, banks):
    """Store the reader's run (``c.reader.group``, the rest of a beat a clock), word ``x`` at
    index ``x`` of every ``WordBanks`` in ``banks``, ``c.i`` counting the words. Returns a
    signal that is high once the run is over (the caller then moves on and resets ``c.i``)."""
    group = c.reader.group
    m.d.comb += group.ready.eq(1)
    for memory in banks:
        m.d.comb += [memory.write_at.eq(c.i), memory.write.eq(group.payload),
                     memory.write_en.eq(group.valid)]
    with m.If(group.valid):
        m.d.sync += c.i.eq(c.i + group.payload.count)
    return ~c.reader.busy & ~group.valid


def copy_group(m, *, step, at, index, count, banks, address, writer, lanes):
    """Stream ``count`` words of a ``WordBanks`` (``banks``) into ``writer``'s run, up to
    ``lanes`` a clock (``writer.group``): as :func:`copy_words`, word ``x`` at index
    ``address(x)``, ``index`` counting the words sent."""
    size = Signal(range(lanes + 1), name="copy_group_size")
    m.d.comb += size.eq(Mux(count - index > lanes, lanes, count - index))
    group = writer.group
    return _copy(m, step=step, at=at, index=index, count=count, size=size, port=group,
                 read_at=lambda x: banks.read_at.eq(address(x)),
                 payload=[group.payload.count.eq(size),
                          *(group.payload.data[k].eq(banks.read_group[k])
                            for k in range(lanes))])


def verify_locs_states(m, c, *, name, address, then):
    """Two sequencer states, ``{name}_START`` and ``{name}``, that read the verify forward's
    ``B * n`` KV slots from ``address`` into ``verify_cache_locs`` and K7's copy (``n`` in its
    register from the first), then go to state ``then``."""
    with m.State(f"{name}_START"):
        m.d.comb += [c.reader.start.eq(1), c.reader.address.eq(address),
                     c.reader.count.eq(c.batch * c.vn)]
        m.next = name

    with m.State(name):
        with m.If(store_group_run(m, c, banks=(c.locs, c.locs2))):
            m.d.sync += [c.b.eq(0), c.i.eq(0), c.j.eq(0)]
            m.next = then


def table_address(m, c, *, pool, offset, name):
    """The byte address of ``req_to_token[pool, offset]``, ``req_to_token + 4 * (pool * C +
    offset)``, from ``pool`` and ``offset`` as they were ``TABLE_ADDRESS_LATENCY`` clocks before.

    A free-running pipeline: the inputs (block RAM outputs at every caller) go into registers,
    then the product and sum into one, and the last sum is left to the memory port's run
    registers; a block RAM's output into the multiply would not fit a clock. ``pool`` must be a
    checked row (below ``max_pool_rows``: ``begin_round`` refuses any other), so the multiply
    is ``index_bits(max_pool_rows)`` by 32 bits. ``c`` holds the engine's shared signals.
    """
    pool_q = Signal(index_bits(c.p.max_pool_rows), name=f"{name}_pool")
    offset_q = Signal(32, name=f"{name}_offset")
    word = Signal(c.p.address_width, name=f"{name}_word")
    m.d.sync += [pool_q.eq(pool), offset_q.eq(offset),
                 word.eq(pool_q * c.cfg.context_len + offset_q)]
    return c.cfg.req_to_token + 4 * word
