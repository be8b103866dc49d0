"""A sequencer step shared by the engine's commands: an on-chip memory's words into a write
run."""

from amaranth.hdl import Signal

__all__ = ["copy_words"]


def copy_words(m, *, step, at, index, count, read, address, writer):
    """Stream ``count`` words of an on-chip memory into ``writer``'s run, one per clock.

    Word ``x`` is at ``address(x)`` of the read port ``read``, which is read a clock ahead.
    ``step`` is the caller's sub-state counter: at ``at`` the first word is fetched (``index``
    must be 0), from ``at + 1`` on the words go out, ``index`` counting them. Returns a signal
    that is high once all ``count`` are taken; the caller then moves on.
    """
    sending = step == at + 1
    m.d.comb += read.addr.eq(address(index + (writer.words.ready & sending)))
    done = Signal()
    with m.If(step == at):
        m.d.sync += step.eq(at + 1)
    with m.Elif(index == count):
        m.d.comb += done.eq(1)
    with m.Else():
        m.d.comb += [writer.words.valid.eq(1), writer.words.payload.eq(read.data)]
        with m.If(writer.words.ready):
            m.d.sync += index.eq(index + 1)
    return done
