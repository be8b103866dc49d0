"""Sequencer steps shared by the engine's commands: a command component's start and finish,
an on-chip memory and its ports, a read run's words into on-chip memories, an on-chip memory's
words into a write run (or a ``req_to_token`` row), and the address of a ``req_to_token``
row."""

from amaranth.hdl import Mux, Signal
from amaranth.lib.memory import Memory

from hw.lib.params import index_bits

__all__ = ["idle_state", "finish", "memory", "copy_words", "copy_group", "store_locs",
           "store_locs_states",
           "table_address", "copy_table_row", "TABLE_ADDRESS_LATENCY", "TABLE_READY"]

#: Clocks from a ``table_address`` input to its output (see there).
TABLE_ADDRESS_LATENCY = 2
#: The caller's sub-step at which a table row's address is ready when the row's pool and
#: seq_len are addressed from sub-step 0 on (out of their memories a clock later).
TABLE_READY = 1 + TABLE_ADDRESS_LATENCY


def idle_state(m, start, command, *, clear=()):
    """A command component's ``IDLE`` state: it takes a ``start`` transfer into ``command``
    (and zeroes the signals in ``clear``), then goes to its ``CHECK`` state."""
    with m.State("IDLE"):
        m.d.comb += start.ready.eq(1)
        with m.If(start.valid):
            m.d.sync += [command.eq(start.payload), *(signal.eq(0) for signal in clear)]
            m.next = "CHECK"


def finish(m, done, **fields):
    """A command component ends: it offers ``done`` with the payload ``fields`` and goes back
    to ``IDLE`` once the sequencer takes it (in the same clock, the way the sequencer does)."""
    m.d.comb += [done.valid.eq(1),
                 *(getattr(done.payload, name).eq(value) for name, value in fields.items())]
    with m.If(done.ready):
        m.next = "IDLE"


def memory(m, name, shape, depth):
    """A ``Memory`` of ``depth`` words of ``shape`` (no initial contents), submodule ``name``
    of ``m``; returns its read port and its write port."""
    mem = m.submodules[name] = Memory(shape=shape, depth=depth, init=[])
    return mem.read_port(), mem.write_port()


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


def copy_words(m, *, step, at, index, count, addr, data, address, writer):
    """Stream ``count`` words of an on-chip memory into ``writer``'s run, one per clock.

    Word ``x`` is at ``address(x)`` of a read port (its address ``addr``, its word ``data``)
    that is read a clock ahead.
    ``step`` is the caller's sub-state counter: at ``at`` the first word is fetched (``index``
    must be 0), from ``at + 1`` on the words go out, ``index`` counting them. Returns a signal
    that is high once all ``count`` are taken; the caller then moves on.
    """
    return _copy(m, step=step, at=at, index=index, count=count, size=1, port=writer.words,
                 read_at=lambda x: addr.eq(address(x)),
                 payload=[writer.words.payload.eq(data)])


def copy_group(m, *, step, at, index, count, read_at, read_group, address, writer, lanes):
    """Stream ``count`` words of a ``WordBanks`` (its ``read_at`` and ``read_group``) into
    ``writer``'s run, up to ``lanes`` a clock (``writer.group``): as :func:`copy_words`, word
    ``x`` at index ``address(x)``, ``index`` counting the words sent."""
    size = Signal(range(lanes + 1), name="copy_group_size")
    m.d.comb += size.eq(Mux(count - index > lanes, lanes, count - index))
    group = writer.group
    return _copy(m, step=step, at=at, index=index, count=count, size=size, port=group,
                 read_at=lambda x: read_at.eq(address(x)),
                 payload=[group.payload.count.eq(size),
                          *(group.payload.data[k].eq(read_group[k])
                            for k in range(lanes))])


def store_locs(m, command, *, index):
    """The verify KV slots ``command.reader`` is reading, handed on a read beat a clock
    (``command.locs_at``, ``command.locs_en``; the words are the reader's ``group`` payload),
    ``index`` counting them. Returns a signal that is high once the reader is done and no
    group waits."""
    reader, group = command.reader, command.reader.group
    m.d.comb += [group.ready.eq(1), command.locs_at.eq(index), command.locs_en.eq(group.valid)]
    with m.If(group.valid):
        m.d.sync += index.eq(index + group.payload.count)
    done = Signal(name="locs_stored")
    m.d.comb += done.eq(~reader.busy & ~group.valid)
    return done


def store_locs_states(m, command, *, address, count, index, then):
    """Two states of ``command``'s FSM, ``LOCS_START`` and ``LOCS``, that read the verify
    forward's ``count`` KV slots from ``address`` with ``command.reader`` and store them
    (:func:`store_locs`); then ``index`` is 0 again and the FSM goes to state ``then``."""
    reader = command.reader
    with m.State("LOCS_START"):
        m.d.comb += [reader.start.eq(1), reader.address.eq(address), reader.count.eq(count)]
        m.next = "LOCS"

    with m.State("LOCS"):
        with m.If(store_locs(m, command, index=index)):
            m.d.sync += index.eq(0)
            m.next = then


def table_address(m, params, config, *, pool, offset, name):
    """The byte address of ``req_to_token[pool, offset]``, ``req_to_token + 4 * (pool * C +
    offset)``, from ``pool`` and ``offset`` as they were ``TABLE_ADDRESS_LATENCY`` clocks before.

    A free-running pipeline: the inputs (block RAM outputs at every caller) go into registers,
    then the product and sum into one, and the last sum is left to the memory port's run
    registers; a block RAM's output into the multiply would not fit a clock. ``pool`` must be a
    checked row (below ``max_pool_rows``: ``begin_round`` refuses any other), so the multiply
    is ``index_bits(max_pool_rows)`` by 32 bits. ``params`` is the ``EngineParams``,
    ``config`` the engine's ``config`` value (``req_to_token``, ``context_len``).
    """
    pool_q = Signal(index_bits(params.max_pool_rows), name=f"{name}_pool")
    offset_q = Signal(32, name=f"{name}_offset")
    word = Signal(params.address_width, name=f"{name}_word")
    m.d.sync += [pool_q.eq(pool), offset_q.eq(offset),
                 word.eq(pool_q * config.context_len + offset_q)]
    return config.req_to_token + 4 * word


def copy_table_row(m, *, step, index, count, address, addr, data, table):
    """Write ``count`` words of an on-chip memory (word ``x`` at ``addr`` = ``x`` of a read
    port, its word ``data``) into a ``req_to_token`` row with the ``table`` writer, the
    caller's sub-step counter ``step`` from 0: ``TABLE_READY`` clocks for the row's address
    (``address``, from the row's pool and seq_len the caller reads from sub-step 0 on), the
    run started once ``table`` can take it, then the words (:func:`copy_words`, ``index``
    counting them). Returns a signal that is high once all are taken."""
    done = Signal(name="table_row_done")
    with m.If(step < TABLE_READY):
        m.d.sync += step.eq(step + 1)
    with m.Elif(step == TABLE_READY):
        with m.If(table.can_start):
            m.d.comb += [table.start.eq(1), table.count.eq(count), table.address.eq(address)]
            m.d.sync += [step.eq(TABLE_READY + 1), index.eq(0)]
    with m.Else():
        m.d.comb += done.eq(copy_words(m, step=step, at=TABLE_READY + 1, index=index,
                                       count=count, addr=addr, data=data, writer=table,
                                       address=lambda x: x))
    return done
