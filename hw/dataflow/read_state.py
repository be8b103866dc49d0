"""The engine's ``read_state`` command (``hw.dataflow.engine.PersistentEngine``): one slot's state
out to memory, for debugging and replay.

The state record (``records.STATE``; docs/engine.md, "Memory formats"): phase, ``seq_len``,
``req_pool_index`` (-1 for a slot no round has used), ``cumu_count``; then the ``cumu_count``
valid nodes of the slot's tree (``records.NODE``, read out of K2), its
``MAXV`` ``sort_scores`` and ``MAXV + K`` ``work_scores``. A slot in the round in flight reports
that round; any other slot what its last round left.
"""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.kernels.update_state import Region

from .commands import Phase, Status
from .memory_ports import writer_control_signature
from .records import NODE, STATE
from .runs import finish, idle_state

__all__ = ["ReadState", "slot_info_layout", "save_slot_rows"]

#: What a slot's last round left (the engine's ``slot_info`` memory, a row per slot).
slot_info_layout = data.StructLayout({"phase": 2, "seq_len": 32, "pool": 32, "cumu_count": 32})


def save_slot_rows(m, *, index, step, batch, slot, seq_len, pool, phase, cumu_count, info_at,
                   info_write, info_en, saved_slot, saved_en):
    """Save the round in flight (its ``phase``, ``batch`` and ``cumu_count``) into
    ``slot_info``, which ``read_state`` reports for a slot outside the round in flight: batch
    row ``index`` after row, two clocks a row (``step`` 0, then 1: the caller reads the row's
    ``slot``, ``seq_len`` and ``pool`` at ``index`` in the round's bank, a clock later they are
    here). ``info_*`` write the slot's row; ``saved_*`` mark the slot as having one. Returns
    whether every row is saved (``index == batch``); the caller moves on then."""
    done = index == batch
    with m.If(~done & (step == 0)):
        m.d.sync += step.eq(1)
    with m.Elif(~done):
        m.d.comb += [info_at.eq(slot), info_en.eq(1), info_write.phase.eq(phase),
                     info_write.seq_len.eq(seq_len), info_write.pool.eq(pool),
                     info_write.cumu_count.eq(cumu_count), saved_slot.eq(slot), saved_en.eq(1)]
        m.d.sync += [index.eq(index + 1), step.eq(0)]
    return done


class ReadState(wiring.Component):
    """``read_state`` (see the module): started by a ``start`` transfer, finished by a
    ``done`` transfer offered in the clock the command ends (a dispatcher that takes it
    then completes the command in the next clock).

    Parameters
    ----------
    params : EngineParams
        The engine's build.

    Members
    -------
    start : In(stream.Signature({"slot": ..., "address": ...}))
        The command's slot and the state record's byte address.
    done : Out(stream.Signature({"status": 3}))
        The command's ``Status``: ``OK``, or ``BAD_SLOT`` for a slot past ``max_batch``.
    info : In(slot_info_layout)
        The slot's ``slot_info`` row, a clock after the start (the dispatcher reads the row
        of the command's slot).
    batch_seq_len, batch_pool : In(32)
        The slot's ``seq_len`` and ``req_pool_index`` in the round in flight, two clocks
        after the start (the dispatcher reads them at the slot's batch row).
    in_round, saved : In(max_batch)
        Per slot: in the round in flight; has a ``slot_info`` row.
    phase : In(2)
        The round in flight's ``Phase``.
    cumu_count : In(range(max_node_count + max_candidates + 1))
        The round in flight's node count.
    writer : Out(writer_control_signature(...))
        The result writer (``result_write``).
    k2_cmd : Out(stream.Signature(params.k2.host_command_layout))
        K2's host port: element reads.
    k2_rsp : In(stream.Signature(params.k2.host_response_layout))
        Their answers.
    """

    def __init__(self, params):
        self._params = p = params
        slot_width = p.command_layout["slot"].width
        super().__init__({
            "start": In(stream.Signature(data.StructLayout({
                "slot": slot_width, "address": p.address_width}))),
            "done": Out(stream.Signature(data.StructLayout({"status": 3}))),
            "info": In(slot_info_layout),
            "batch_seq_len": In(32), "batch_pool": In(32),
            "in_round": In(p.max_batch), "saved": In(p.max_batch),
            "phase": In(2),
            "cumu_count": In(range(p.max_node_count + p.max_candidates + 1)),
            "writer": Out(writer_control_signature(p.address_width, p.max_run_words)),
            "k2_cmd": Out(stream.Signature(p.k2.host_command_layout)),
            "k2_rsp": In(stream.Signature(p.k2.host_response_layout)),
        })

    def elaborate(self, platform):
        p = self._params
        MAXB, MAXV, K = p.max_batch, p.max_verify_num, p.node_top_k
        m = Module()
        command = Signal.like(self.start.payload, reset_less=True)  # datapath
        slot, address = command.slot, command.address
        total = p.max_node_count + 2 * MAXV + K  # elements of the longest record
        i = Signal(range(total + 2))  # element
        j = Signal(range(max(STATE.size, NODE.size) + 3))  # step within it
        nodes = Signal(range(p.max_node_count + p.max_candidates + 1))  # the slot's
        node = Signal(p.k2.host_response_layout, reset_less=True)  # the element K2 answered
        current = Signal()  # the slot is in the round in flight
        saved = Signal()  # the slot has a saved record
        writer = self.writer

        with m.FSM(name="read_state"):
            idle_state(m, self.start, command, clear=(i, j))

            with m.State("CHECK"):
                with m.If(slot >= MAXB):
                    finish(m, self.done, status=Status.BAD_SLOT)
                with m.Else():
                    m.next = "ROW"

            with m.State("ROW"):  # the slot's info and batch row are read
                bits = len(self.in_round).bit_length()
                m.d.sync += [current.eq(self.in_round.bit_select(slot[:bits], 1)),
                             saved.eq(self.saved.bit_select(slot[:bits], 1))]
                m.next = "HEADER"

            with m.State("HEADER"):
                info = self.info
                used = current | saved
                header = Array(STATE.in_order({
                    "phase": Mux(current, self.phase, Mux(saved, info.phase, Phase.IDLE)),
                    "seq_len": Mux(current, self.batch_seq_len, Mux(saved, info.seq_len, 0)),
                    "req_pool_index": Mux(current, self.batch_pool,
                                          Mux(saved, info.pool, -1)),
                    "cumu_count": Mux(current, self.cumu_count,
                                      Mux(saved, info.cumu_count, 0))}))
                with m.If(j == 0):  # the slot's node count first, in a register
                    m.d.sync += [j.eq(1),
                                 nodes.eq(Mux(used, header[STATE.word("cumu_count")], 0))]
                with m.Elif(j == 1):
                    m.d.comb += [writer.start.eq(1), writer.address.eq(address),
                                 writer.count.eq(STATE.size + NODE.size * nodes
                                                 + 2 * MAXV + K)]
                    m.d.sync += j.eq(2)
                with m.Else():
                    m.d.comb += [writer.words.valid.eq(1), writer.words.payload.eq(header[i])]
                    with m.If(writer.words.ready):
                        m.d.sync += i.eq(i + 1)
                        with m.If(i == STATE.size - 1):
                            m.d.sync += [i.eq(0), j.eq(0)]
                            m.next = "ROWS"

            with m.State("ROWS"):
                # element i of the nodes, then sort_scores, then work_scores: j = 0 read,
                # 1 wait for the answer, 2.. its words out
                command = self.k2_cmd.payload
                in_sort = i >= nodes
                in_work = i >= nodes + MAXV
                index = Mux(in_work, i - nodes - MAXV, Mux(in_sort, i - nodes, i))
                m.d.comb += [command.slot.eq(slot), command.index.eq(index),
                             command.region.eq(Mux(in_work, Region.WORK,
                                                   Mux(in_sort, Region.SORT, Region.NODE))),
                             self.k2_rsp.ready.eq(1)]
                words = Mux(in_sort, 1, NODE.size)
                with m.If(i == nodes + 2 * MAXV + K):
                    with m.If(~writer.busy):
                        finish(m, self.done, status=Status.OK)
                with m.Elif(j == 0):
                    m.d.comb += self.k2_cmd.valid.eq(1)
                    with m.If(self.k2_cmd.ready):
                        m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    with m.If(self.k2_rsp.valid):
                        m.d.sync += [node.eq(self.k2_rsp.payload), j.eq(2)]
                with m.Else():
                    fields = Array(NODE.in_order({"token": node.tok, "score": node.score,
                                                  "delta": node.delta, "prev": node.prev,
                                                  "next": node.next, "side": node.side}))
                    m.d.comb += [writer.words.valid.eq(1),
                                 writer.words.payload.eq(Mux(in_sort, node.score,
                                                             fields[j - 2]))]
                    with m.If(writer.words.ready):
                        m.d.sync += j.eq(j + 1)
                        with m.If(j - 2 == words - 1):
                            m.d.sync += [j.eq(0), i.eq(i + 1)]
        return m
