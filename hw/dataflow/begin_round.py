"""The engine's ``begin_round`` command (``hw.dataflow.engine.PersistentEngine``; what each state
does: docs/engine.md): the batch's argument records read and checked into the idle bank of the
batch memories, the round in flight saved, then K2's initial rows, the frontier's root and the
round's KV slots into ``req_to_token``.

A refused ``begin_round`` (``BAD_SLOT``: more requests than slots, a slot past ``max_batch`` or
named twice; ``BAD_ARGUMENT``: a root token past the vocabulary, a pool row past the table or
named twice, a ``seq_len`` without room for the round, ``depths`` outside ``1 ..
max_depths``) leaves the round in flight as it was: the records go into the bank the round
does not use, and the sequencer swaps the banks only on ``OK``.
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.kernels.update_state import Region
from hw.lib.params import index_bits

from .commands import ROOT_SCORE_BITS, Status
from .memory_ports import reader_control_signature, writer_control_signature
from .read_state import save_slot_rows, slot_info_layout
from .records import ARGUMENT
from .runs import TABLE_READY, copy_table_row, finish, idle_state, table_address

__all__ = ["BeginRound", "batch_row_layout"]

#: A request's row of the batch memories (``batch_slot``, ``batch_seq_len``, ``batch_pool``)
#: and its root token (``batch_root``), as ``begin_round`` writes them.
batch_row_layout = data.StructLayout({"slot": 32, "seq_len": 32, "pool": 32, "root": 32})


class BeginRound(wiring.Component):
    """``begin_round`` (see the module): started by a ``start`` transfer, finished by a
    ``done`` transfer offered in the clock the command ends. It owns the pool rows' bitmap
    (``pool_seen``); the batch memories, K2's host port and the ports it reaches through the
    members below, which the engine connects while the command runs. Two FSMs:
    ``begin_round`` and ``begin_table`` (the ``req_to_token`` runs, beside ``INIT``'s K2
    writes).

    Parameters
    ----------
    params : EngineParams
        The engine's build.

    Members
    -------
    start : In(stream.Signature({"batch_size", "records", "depths"}))
        The command's ``batch_size``, the argument records' byte address (``address0``) and
        ``depths``.
    done : Out(stream.Signature({"status": 3, "slots": max_batch}))
        The ``Status`` and the new round's slots (one bit per slot). On ``OK`` the sequencer
        swaps the banks and starts the round.
    config : In(config_layout)
        The engine's settings (the vocabulary, the table's rows and row length, its address).
    phase : In(2), batch : In(range(max_batch + 1)), cumu_count : In(...)
        The round in flight's phase, requests and node count, saved for each of its slots.
    request : Out(range(max_batch + 1))
        The request (batch row) the command is at: the row read, written, whose KV slots are
        written and whose frontier is set, below.
    table_request : Out(range(max_batch + 1))
        The batch row whose ``seq_len``, ``req_pool_index`` and KV slots are read (and the KV
        slots written): ``request``, but for the ``req_to_token`` runs, which go on beside
        the K2 rows' writes.
    row_new : Out(1)
        Batch row ``request`` is read in the idle bank (``row_new``) or in the round's (its
        save); the slot and the root token (``batch_root`` at ``request``), and ``seq_len``
        and ``req_pool_index`` of ``table_request`` on the inputs below a clock later.
    slot, seq_len, pool, root : In(32)
    row_write : Out(batch_row_layout), row_write_en
        The request's row into the idle bank (and its root token).
    kv_slot : Out(range(kv_slots))
        A draft KV slot of the request in the idle bank, written (``kv_write``, ``kv_en``) or
        read (``kv_read``, a clock later).
    kv_write : Out(32), kv_en : Out(1), kv_read : In(32)
    info_at, info_write : Out(slot_info_layout), info_en
        A slot's ``slot_info`` row: what the round in flight leaves in it.
    saved_slot, saved_en : Out
        That slot has a ``slot_info`` row from now on.
    slot_row_at, slot_row_write, slot_row_en : Out
        A slot's row in the new round (``slot_row``).
    frontier_en : Out(1)
        The request's frontier becomes the root alone (score 1.0, node 0, no mask).
    k2_cmd : Out(stream.Signature(params.k2.host_command_layout))
        K2's host port: the initial rows (writes; their answers are dropped).
    host_idle : In(1)
        No command waits for K2.
    reader : Out(reader_control_signature(...))
        The sequencer's reader (``read``): the argument records.
    table : Out(writer_control_signature(...))
        The table writer (``table_write``): ``req_to_token``.
    """

    def __init__(self, params):
        self._params = p = params
        a, rows = p.address_width, range(p.max_batch + 1)
        layout = p.command_layout
        super().__init__({
            "start": In(stream.Signature(data.StructLayout({
                "batch_size": layout["batch_size"].shape, "records": a,
                "depths": layout["depths"].shape}))),
            "done": Out(stream.Signature(data.StructLayout({"status": 3,
                                                            "slots": p.max_batch}))),
            "config": In(p.config_layout),
            "phase": In(2), "batch": In(rows),
            "cumu_count": In(range(p.max_node_count + p.max_candidates + 1)),
            "request": Out(rows), "table_request": Out(rows), "row_new": Out(1),
            "slot": In(32), "seq_len": In(32), "pool": In(32), "root": In(32),
            "row_write": Out(batch_row_layout), "row_write_en": Out(1),
            "kv_slot": Out(range(p.kv_slots)),
            "kv_write": Out(32), "kv_en": Out(1), "kv_read": In(32),
            "info_at": Out(range(p.max_batch)), "info_write": Out(slot_info_layout),
            "info_en": Out(1), "saved_slot": Out(range(p.max_batch)), "saved_en": Out(1),
            "slot_row_at": Out(range(p.max_batch)), "slot_row_write": Out(range(p.max_batch)),
            "slot_row_en": Out(1),
            "frontier_en": Out(1),
            "k2_cmd": Out(stream.Signature(p.k2.host_command_layout)),
            "host_idle": In(1),
            "reader": Out(reader_control_signature(a, p.max_run_words, p.port_bits // 32)),
            "table": Out(writer_control_signature(a, p.max_run_words)),
        })

    def elaborate(self, platform):
        p = self._params
        MAXB, MAXV, K, R = p.max_batch, p.max_verify_num, p.node_top_k, p.argument_words
        m = Module()
        # the pool rows named so far: set in POOLS, cleared in CLEAR
        m.submodules.pool_seen = pool_seen = Memory(shape=1, depth=p.max_pool_rows, init=[])
        seen_rd, seen_wr = pool_seen.read_port(), pool_seen.write_port()

        command = Signal.like(self.start.payload, reset_less=True)  # datapath
        batch_size, words = command.batch_size, self.reader.words
        b = Signal(range(MAXB + 1))  # request
        i = Signal(range(max(R, 2 * MAXV + K) + 1))  # word of its record, element of its rows
        j = Signal(range(TABLE_READY + 3))  # sub-step
        slots = Signal(MAXB)  # the slots named so far
        bad_slot = Signal()
        bad_argument = Signal()
        record = Signal(ARGUMENT.layout, reset_less=True)  # the record's fixed words
        # req_to_token[pool, seq_len] of the request's row in the idle bank
        table_row = table_address(m, p, self.config, pool=self.pool, offset=self.seq_len,
                                  name="begin_table")
        # the req_to_token runs' request, element and sub-step (the FSM `begin_table`)
        t = Signal(range(MAXB + 1))
        t_i = Signal(range(p.kv_slots + 1))
        t_j = Signal(range(TABLE_READY + 3))
        table_go = Signal()  # INIT begins: so do the runs
        table_idle = Signal()
        m.d.comb += [self.request.eq(b), self.table_request.eq(b), self.row_new.eq(1)]

        def end(status):
            finish(m, self.done, status=status, slots=slots)

        with m.FSM(name="begin_round"):
            idle_state(m, self.start, command, clear=(b, i, j, slots, bad_slot, bad_argument))

            with m.State("CHECK"):
                with m.If(batch_size > MAXB):
                    end(Status.BAD_SLOT)
                with m.Else():
                    m.d.comb += [self.reader.start.eq(1), self.reader.address.eq(command.records),
                                 self.reader.count.eq(batch_size * R)]
                    m.next = "READ"

            with m.State("READ"):
                # Record b, word i: the fixed fields (ARGUMENT), then the KV slots.
                fixed = ARGUMENT.size
                value = words.payload
                m.d.comb += [words.ready.eq(1), self.kv_slot.eq(i - fixed),
                             self.kv_write.eq(value)]
                with m.If(words.valid):
                    m.d.sync += i.eq(Mux(i == R - 1, 0, i + 1))
                    with m.If(i < fixed):
                        m.d.sync += record.as_value().word_select(
                            i[:index_bits(fixed)], 32).eq(value)
                    with m.Else():
                        m.d.comb += self.kv_en.eq(1)
                    with m.If(i == R - 1):
                        m.d.sync += b.eq(b + 1)
                    with m.If(i == fixed):  # the fixed words are in: check and store them
                        self._check_record(m, record, slots, bad_slot, bad_argument)
                        m.d.comb += [self.row_write.slot.eq(record.slot),
                                     self.row_write.seq_len.eq(record.seq_len),
                                     self.row_write.pool.eq(record.req_pool_index),
                                     self.row_write.root.eq(record.root_token),
                                     self.row_write_en.eq(1)]
                with m.If(~self.reader.busy & ~words.valid & (b == batch_size)):
                    m.d.sync += [b.eq(0), i.eq(0)]
                    m.next = "POOLS"

            with m.State("POOLS"):
                # Repeated pool rows: a bitmap over the rows, set here and cleared in CLEAR
                # (2 clocks per request: read the row, then test and set).
                with m.If(b == batch_size):
                    m.d.sync += b.eq(0)
                    m.next = "CLEAR"
                with m.Elif(i == 0):
                    m.d.sync += i.eq(1)
                with m.Elif(i == 1):
                    m.d.comb += seen_rd.addr.eq(self.pool)
                    m.d.sync += i.eq(2)
                with m.Else():
                    row_ok = self.pool < p.max_pool_rows
                    with m.If(row_ok & seen_rd.data):
                        m.d.sync += bad_argument.eq(1)
                    m.d.comb += [seen_wr.addr.eq(self.pool), seen_wr.data.eq(1),
                                 seen_wr.en.eq(row_ok)]
                    m.d.sync += [b.eq(b + 1), i.eq(0)]

            with m.State("CLEAR"):
                with m.If(i == 0):
                    m.d.sync += i.eq(1)
                with m.Else():
                    m.d.comb += [seen_wr.addr.eq(self.pool), seen_wr.data.eq(0),
                                 seen_wr.en.eq(self.pool < p.max_pool_rows)]
                    m.d.sync += [b.eq(b + 1), i.eq(0)]
                with m.If(b == batch_size):
                    m.d.sync += [b.eq(0), i.eq(0)]
                    with m.If(bad_slot):
                        end(Status.BAD_SLOT)
                    with m.Elif(bad_argument | (command.depths == 0)
                                | (command.depths > p.max_depths)):
                        end(Status.BAD_ARGUMENT)
                    with m.Else():
                        m.next = "SAVE"

            with m.State("SAVE"):
                # The round in flight is abandoned: what it leaves in each of its slots
                # (read_state)
                m.d.comb += self.row_new.eq(0)
                with m.If(save_slot_rows(m, index=b, step=j, batch=self.batch, slot=self.slot,
                                         seq_len=self.seq_len, pool=self.pool,
                                         phase=self.phase, cumu_count=self.cumu_count,
                                         info_at=self.info_at, info_write=self.info_write,
                                         info_en=self.info_en, saved_slot=self.saved_slot,
                                         saved_en=self.saved_en)):
                    m.d.sync += [b.eq(0), j.eq(0)]
                    m.d.comb += table_go.eq(1)
                    m.next = "INIT"

            with m.State("INIT"):
                # Per request: K2 node 0 and the sort/work rows, the frontier's root; element
                # i = 0: node 0; 1 .. MAXV: sort_scores; MAXV+1 .. 2*MAXV+K: work_scores.
                host = self.k2_cmd.payload
                last = 2 * MAXV + K
                with m.If(b == batch_size):
                    with m.If(self.host_idle):  # (the last write's answer is dropped)
                        m.d.sync += [b.eq(0), i.eq(0)]
                        m.next = "TABLE"
                with m.Elif(j == 0):  # memories read for request b
                    m.d.sync += j.eq(1)
                with m.Else():
                    m.d.comb += [self.k2_cmd.valid.eq(1), host.write.eq(1),
                                 host.slot.eq(self.slot), self.slot_row_at.eq(self.slot),
                                 self.slot_row_write.eq(b), self.slot_row_en.eq(1)]
                    with m.If(i == 0):
                        m.d.comb += [host.region.eq(Region.NODE), host.index.eq(0),
                                     host.tok.eq(self.root), host.score.eq(ROOT_SCORE_BITS),
                                     host.delta.eq(0), host.prev.eq(-1), host.next.eq(-1),
                                     host.side.eq(-1)]
                    with m.Elif(i <= MAXV):
                        m.d.comb += [host.region.eq(Region.SORT), host.index.eq(i - 1),
                                     host.score.eq(Mux(i == 1, ROOT_SCORE_BITS, 0))]
                    with m.Else():
                        m.d.comb += [host.region.eq(Region.WORK), host.index.eq(i - 1 - MAXV),
                                     host.score.eq(Mux(i == MAXV + 1, ROOT_SCORE_BITS, 0))]
                    with m.If(self.k2_cmd.ready):
                        m.d.sync += i.eq(Mux(i == last, 0, i + 1))
                        with m.If(i == last):
                            m.d.sync += [b.eq(b + 1), j.eq(0)]
                            m.d.comb += self.frontier_en.eq(1)

            with m.State("TABLE"):
                # the req_to_token runs (begin_table, below) end; the command ends once every
                # write has its response
                with m.If(table_idle & ~self.table.busy):
                    end(Status.OK)

        # req_to_token[pool, seq_len + x] = kv slot x, x = 0..MI, one run per request, beside
        # INIT's K2 writes
        with m.FSM(name="begin_table"):
            with m.State("IDLE"):
                m.d.comb += table_idle.eq(1)
                with m.If(table_go):
                    m.d.sync += [t.eq(0), t_i.eq(0), t_j.eq(0)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.table_request.eq(t)
                with m.If(t == batch_size):
                    m.next = "IDLE"
                with m.Else():
                    with m.If(copy_table_row(m, step=t_j, index=t_i, count=p.kv_slots,
                                             address=table_row, addr=self.kv_slot,
                                             data=self.kv_read, table=self.table)):
                        m.d.sync += [t.eq(t + 1), t_j.eq(0), t_i.eq(0)]
        return m

    def _check_record(self, m, record, slots, bad_slot, bad_argument):
        """The checks of a record's fixed fields (``slots``: the slots named before it)."""
        p, cfg = self._params, self.config
        bits = index_bits(p.max_batch)
        slot = record.slot
        in_range = slot < p.max_batch
        with m.If(~in_range | slots.bit_select(slot[:bits], 1)):
            m.d.sync += bad_slot.eq(1)
        with m.Else():
            m.d.sync += slots.eq(slots | (1 << slot[:bits]))
        room = Const(max(p.kv_slots, p.max_verify_num), 33)
        seq_len, pool = record.seq_len, record.req_pool_index
        with m.If((record.root_token >= cfg.vocab_size) | (pool >= cfg.pool_rows)
                  | (pool >= p.max_pool_rows) | seq_len[31]
                  | (seq_len + room > cfg.context_len)):
            m.d.sync += bad_argument.eq(1)
