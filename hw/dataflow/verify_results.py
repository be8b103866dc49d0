"""``verify``'s result records as a state of ``Verify`` (``WRITE``): per request its ``RESULT``
record (the fixed words, ``accept_index`` [S], ``predicts`` [n], the ``evict_mask`` words) into
the result writer, a section's words a transfer a clock: the fixed words, ``accept_index`` and
the mask words up to the writer's group width (``G``) at a time, ``predicts`` a read beat of its
banks (``lanes`` words) at a time.

A transfer never holds words of two sections, so a request's record takes ``ceil(RESULT.size /
G) + ceil(S / G) + ceil(n / lanes) + ceil(ceil(n / 32) / G)`` clocks, and one more while its
rows of ``Verify``'s memories are read.
"""

from amaranth.hdl import Array, Cat, Const, Mux, Signal

from .records import RESULT

__all__ = ["result_records_state"]

HEADER, ACCEPT_INDEX, PREDICTS, EVICT_MASK = range(4)


def result_records_state(m, *, results, address, predicts, rows, batch, vn, steps, b, j,
                         max_steps, max_verify_num, then):
    """The state ``WRITE``: the batch's ``batch`` result records from byte ``address`` on,
    through ``results`` (a result writer's control, with its ``group``).

    ``predicts`` is the ``WordBanks`` of the requests' ``predicts`` rows (request ``b``'s from
    entry ``b * vn``); ``rows`` are the read ports of ``Verify``'s per-request memories
    ``(verify_results, accept_index, active_inverse, active_slots)``, each addressed here by
    request. ``vn`` (``n``, at least 1) and ``steps`` (``S``) hold for the command. ``b`` and
    ``j`` are the caller's counters: zero on entry, and again when the FSM goes to ``then``
    once the writer can take a run.
    """
    group = results.group
    width = len(group.payload.data)
    lanes = predicts.lanes
    evict_words = -(-max_verify_num // 32)
    vres_rd, accidx_rd, inverse_rd, aslot_rd = rows
    longest = max(RESULT.size, max_steps, max_verify_num, evict_words)
    section = Signal(2, name="result_section")
    x = Signal(range(longest + max(width, lanes) + 1), name="result_word")  # in its section
    mask_words = Signal(range(evict_words + 1), name="result_mask_words")
    length = Signal(range(longest + 1), name="result_section_words")
    size = Signal(range(max(width, lanes) + 1), name="result_transfer_words")
    m.d.sync += mask_words.eq((vn + 31) >> 5)  # (vn holds for the command)
    m.d.comb += [length.eq(Array([Const(RESULT.size), steps, vn, mask_words])[section]),
                 size.eq(Mux(length - x > Mux(section == PREDICTS, lanes, width),
                             Mux(section == PREDICTS, lanes, width), length - x))]

    with m.State("WRITE"):
        m.d.comb += [vres_rd.addr.eq(b), accidx_rd.addr.eq(b), inverse_rd.addr.eq(b),
                     aslot_rd.addr.eq(b)]
        taken = group.valid & group.ready
        # predicts is read a transfer ahead: its first beat while the sections before go out
        m.d.comb += predicts.read_at.eq(b * vn + Mux(section == PREDICTS,
                                                     x + Mux(taken, size, 0), 0))
        with m.If(j == 0):
            m.d.comb += [results.start.eq(1), results.address.eq(address),
                         results.count.eq(batch * (RESULT.size + steps + vn + mask_words))]
            m.d.sync += j.eq(1)
        with m.Elif(b == batch):
            with m.If(results.can_start):
                m.d.sync += [j.eq(0), b.eq(0)]
                m.next = then
        with m.Elif(j == 1):  # the request's rows are being read
            m.d.sync += [j.eq(2), x.eq(0), section.eq(HEADER)]
        with m.Else():
            r = vres_rd.data
            fields = {"accept_token_num": r.accept_token_num, "accept_length": r.accept_length,
                      "next_root": r.next_root, "finished": r.finished, "seq_len": r.seq_len,
                      "nan_flag": r.nan, "verified_offset": r.offset,
                      "active_slot": aslot_rd.data, "active_inverse": inverse_rd.data,
                      "rows_read": r.rows}
            header = Array(RESULT.in_order(fields))
            evict = Cat(r.evict, Const(0, 32 * evict_words - max_verify_num))
            m.d.comb += [group.valid.eq(1), group.payload.count.eq(size)]
            for k in range(width):
                word = group.payload.data[k]
                with m.Switch(section):
                    with m.Case(HEADER):
                        m.d.comb += word.eq(header[x + k])
                    with m.Case(ACCEPT_INDEX):
                        m.d.comb += word.eq(accidx_rd.data[x + k])
                    with m.Case(PREDICTS):
                        if k < lanes:
                            m.d.comb += word.eq(predicts.read_group[k])
                    with m.Case(EVICT_MASK):
                        m.d.comb += word.eq(evict.word_select(x + k, 32))
            with m.If(taken):
                with m.If(x + size == length):
                    m.d.sync += [x.eq(0), section.eq(section + 1)]
                    with m.If(section == EVICT_MASK):
                        m.d.sync += [b.eq(b + 1), j.eq(1)]
                with m.Else():
                    m.d.sync += x.eq(x + size)
