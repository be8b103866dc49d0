"""The engine's ``read_state`` command as states of its sequencer
(``hw.dataflow.engine.PersistentEngine``): one slot's state out to memory, for debugging and replay.

The state record (``records.STATE``; docs/engine.md, "Memory formats"): phase, ``seq_len``,
``req_pool_index`` (-1 for a slot no round has used), ``cumu_count``; then the ``cumu_count``
valid nodes of the slot's tree (``records.NODE``, read out of K2), its
``MAXV`` ``sort_scores`` and ``MAXV + K`` ``work_scores``. A slot in the round in flight reports
that round; any other slot what its last round left.
"""

from amaranth.hdl import Array, Mux, Signal

from hw.kernels.update_state import Region

from .commands import Phase, Status
from .records import NODE, STATE

__all__ = ["read_state_states"]


def read_state_states(m, c):
    """The sequencer states of ``read_state`` (see the module).

    ``c`` holds the engine's shared signals, memories and kernels (``PersistentEngine.elaborate``).
    """
    slot = c.cmd.slot
    with m.State("STATE_CHECK"):
        m.d.comb += [c.info_rd.addr.eq(slot), c.slot_row_rd.addr.eq(slot)]
        with m.If(slot >= c.MAXB):
            m.d.sync += c.status.eq(Status.BAD_SLOT)
            m.next = "COMPLETE"
        with m.Else():
            m.d.sync += [c.i.eq(0), c.j.eq(0)]
            m.next = "STATE_ROW"

    # whether the slot is in the round in flight, or has a saved record (from STATE_ROW on)
    current = Signal(name="state_current")
    saved = Signal(name="state_saved")
    with m.State("STATE_ROW"):  # the slot's info and batch row are read
        m.d.comb += [c.info_rd.addr.eq(slot), c.slot_row_rd.addr.eq(slot),
                     c.seq_rd.addr.eq(c.row(c.slot_row_rd.data)),
                     c.pool_rd.addr.eq(c.row(c.slot_row_rd.data))]
        m.d.sync += [current.eq(c.in_round.bit_select(slot[:len(c.in_round).bit_length()], 1)),
                     saved.eq(c.saved.bit_select(slot[:len(c.saved).bit_length()], 1))]
        m.next = "STATE_HEADER"

    with m.State("STATE_HEADER"):
        m.d.comb += [c.info_rd.addr.eq(slot), c.slot_row_rd.addr.eq(slot),
                     c.seq_rd.addr.eq(c.row(c.slot_row_rd.data)),
                     c.pool_rd.addr.eq(c.row(c.slot_row_rd.data))]
        info = c.info_rd.data
        used = current | saved
        header = Array(STATE.in_order({
            "phase": Mux(current, c.phase, Mux(saved, info.phase, Phase.IDLE)),
            "seq_len": Mux(current, c.seq_rd.data, Mux(saved, info.seq_len, 0)),
            "req_pool_index": Mux(current, c.pool_rd.data, Mux(saved, info.pool, -1)),
            "cumu_count": Mux(current, c.cumu_count, Mux(saved, info.cumu_count, 0))}))
        with m.If(c.j == 0):  # the slot's node count first, in a register
            m.d.sync += [c.j.eq(1),
                         c.running.eq(Mux(used, header[STATE.word("cumu_count")], 0))]
        with m.Elif(c.j == 1):
            m.d.comb += [c.rwriter.start.eq(1), c.rwriter.address.eq(c.cmd.address0),
                         c.rwriter.count.eq(STATE.size + NODE.size * c.running
                                            + 2 * c.MAXV + c.K)]
            m.d.sync += c.j.eq(2)
        with m.Else():
            m.d.comb += [c.rwriter.words.valid.eq(1), c.rwriter.words.payload.eq(header[c.i])]
            with m.If(c.rwriter.words.ready):
                m.d.sync += c.i.eq(c.i + 1)
                with m.If(c.i == STATE.size - 1):
                    m.d.sync += [c.i.eq(0), c.j.eq(0)]
                    m.next = "STATE_ROWS"

    with m.State("STATE_ROWS"):
        # element i of the nodes (c.running of them), then sort_scores, then work_scores:
        # j = 0 read, 1 wait for the answer, 2.. its words out
        host = c.host_cmd.payload
        nodes = c.running
        in_sort = c.i >= nodes
        in_work = c.i >= nodes + c.MAXV
        total = nodes + 2 * c.MAXV + c.K
        index = Mux(in_work, c.i - nodes - c.MAXV, Mux(in_sort, c.i - nodes, c.i))
        m.d.comb += [c.slot_rd.addr.eq(0), host.slot.eq(slot), host.index.eq(index),
                     host.region.eq(Mux(in_work, Region.WORK,
                                        Mux(in_sort, Region.SORT, Region.NODE))),
                     c.k2.host_rsp.ready.eq(1)]
        words = Mux(in_sort, 1, NODE.size)
        with m.If(c.i == total):
            with m.If(~c.rwriter.busy):
                m.d.sync += [c.i.eq(0), c.j.eq(0)]
                m.next = "COMPLETE"
        with m.Elif(c.j == 0):
            m.d.comb += c.host_cmd.valid.eq(1)
            with m.If(c.host_cmd.ready):
                m.d.sync += c.j.eq(1)
        with m.Elif(c.j == 1):
            with m.If(c.k2.host_rsp.valid):
                m.d.sync += [c.out_node.eq(c.k2.host_rsp.payload), c.j.eq(2)]
        with m.Else():
            node = c.out_node
            fields = Array(NODE.in_order({"token": node.tok, "score": node.score,
                                          "delta": node.delta, "prev": node.prev,
                                          "next": node.next, "side": node.side}))
            m.d.comb += [c.rwriter.words.valid.eq(1),
                         c.rwriter.words.payload.eq(Mux(in_sort, node.score, fields[c.j - 2]))]
            with m.If(c.rwriter.words.ready):
                m.d.sync += c.j.eq(c.j + 1)
                with m.If(c.j - 2 == words - 1):
                    m.d.sync += [c.j.eq(0), c.i.eq(c.i + 1)]
