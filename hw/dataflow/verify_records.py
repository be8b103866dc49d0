"""``verify``'s request records as states of ``Verify`` (``RECORDS``, ``CHECK_RECORDS``): the
batch's records read a beat a clock into ``requests``, the ``predicts`` rows cleared meanwhile
(a beat of zeros a clock: the fused verify writes the accepted entries), then the checks of
``golden.tree_verify`` (temperature finite and >= 0, ``top_p`` and both thresholds in [0, 1]),
two words a request, before anything is written.

The records lie in ``requests`` as in memory, one after the other (``request_words`` each);
``record_at`` is the first word of request ``b``'s, which ``Verify`` advances with ``b``.
"""

from amaranth.hdl import Mux, Signal

from .commands import unit_interval
from .records import REQUEST

__all__ = ["request_records_states"]

#: The words checked per record, in the order they are read.
CHECKED = (REQUEST.word("temperature"), REQUEST.word("top_p"))


def _temperature_bad(value):
    """Not finite, or below zero (-0.0 is not)."""
    return (value[23:31] == 0xFF) | (value[31] & (value[:31] != 0))


def request_records_states(m, *, reader, requests, predicts, batch, vn, request_words,
                           thresholds, b, j, record_at, bad, refuse, then):
    """The states ``RECORDS`` and ``CHECK_RECORDS``; from the first, ``reader`` runs the
    batch's ``batch * request_words`` record words (started by the caller).

    ``requests`` and ``predicts`` are ``WordBanks`` (of one lane count); ``vn`` is the verify
    set's size (``predicts`` holds ``batch * vn`` entries), ``thresholds`` the command's two
    (float32 bits). ``b``, ``j`` and ``record_at`` are the caller's counters (zero on entry,
    and again on leaving) and ``bad`` its flag of a bad argument (low on entry). A refused
    batch calls ``refuse()`` in the clock the checks end; an accepted one goes to ``then``.
    """
    group = reader.group
    lanes = requests.lanes
    stored = Signal(range(requests.depth + lanes), name="records_stored")
    cleared = Signal(range(predicts.depth + 1), name="predicts_cleared")
    clear_total = Signal(range(predicts.depth + 1), name="predicts_total")
    m.d.sync += clear_total.eq(batch * vn)  # (the inputs hold for the command)
    with m.State("RECORDS"):
        m.d.comb += [group.ready.eq(1), requests.write_at.eq(stored),
                     requests.write.eq(group.payload), requests.write_en.eq(group.valid)]
        with m.If(group.valid):
            m.d.sync += stored.eq(stored + group.payload.count)
        left = clear_total - cleared
        size = Mux(left > lanes, lanes, left)
        m.d.comb += [predicts.write_at.eq(cleared), predicts.write.count.eq(size),
                     predicts.write_en.eq(left != 0)]  # (the data: zeros)
        m.d.sync += cleared.eq(cleared + size)
        with m.If(~reader.busy & ~group.valid & (left == 0)):
            m.d.sync += [stored.eq(0), cleared.eq(0)]
            m.next = "CHECK_RECORDS"

    checking = Signal(name="records_checking")  # a word was read a clock ago...
    checked = Signal(name="records_checked")  # ... this one of CHECKED
    with m.State("CHECK_RECORDS"):
        # j: the word of CHECKED of request b read in this clock
        m.d.comb += requests.read_at.eq(record_at + Mux(j[0], CHECKED[1], CHECKED[0]))
        m.d.sync += [checking.eq(b < batch), checked.eq(j[0])]
        value = requests.read_data
        with m.If(checking & Mux(checked, ~unit_interval(value), _temperature_bad(value))):
            m.d.sync += bad.eq(1)
        with m.If(b < batch):
            m.d.sync += j.eq(~j[0])
            with m.If(j[0]):
                m.d.sync += [b.eq(b + 1), record_at.eq(record_at + request_words)]
        with m.Elif(~checking):
            m.d.sync += [b.eq(0), j.eq(0), record_at.eq(0)]
            threshold_bad = Signal(name="threshold_bad")
            for threshold in thresholds:
                with m.If(~unit_interval(threshold)):
                    m.d.comb += threshold_bad.eq(1)
            with m.If(bad | threshold_bad):
                refuse()
            with m.Else():
                m.next = then
