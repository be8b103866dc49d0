"""The persistent engine (docs/kernels.md §11, docs/engine.md): commands in, tree state on chip.

``PersistentEngine`` executes the commands ``begin_round``, ``draft_depth``, ``build_verify``,
``load_tree`` (a caller's verify tree in place of ``build_verify``'s), ``verify`` and
``read_state`` bit-exact with ``golden.engine.Engine``. Every slot's cumulative
tree, ``sort_scores``, ``work_scores`` and draft mask stay in K2's on-chip memories
(``hw.kernels.update_state``) for the whole round; the round's batch, its frontier, the verify
tree and its KV slots stay in the engine's own memories. Only model-facing data crosses the
memory ports, each with its ``PortCounters``: argument records, the draft model's top-K, the
verify KV slots and request records in (``read``), the target logits rows the fused verify
visits (``logits``), results out (``result_write``), the verify mask (``mask_write``) and the
round's KV slots into ``req_to_token`` (``table_write``). Two word readers share ``read``
(``ReadShare``): the sequencer's and ``draft_depth``'s probability prefetch
(``proba_fetch``); the writers take a record or a beat a transfer (``WordWriter.group``).

The kernels behind the sequencer: K1's score and sort path (``ScoreSortPipeline``), K2, K3 with
the width policy, the fused verify (``TreeVerify``), K7 (``VerifyResult``) and the compaction
(``ActiveSlots``); K4 (``TreeMask``) is ``build_verify``'s own. ``begin_round``,
``read_state``, ``load_tree`` and ``build_verify`` are components of their own
(``BeginRound``, ``ReadState``, ``LoadTree``, ``BuildVerify``), started and finished by the
sequencer and linked to what they share in ``command_links``; ``draft_depth``
(``draft_states``) and ``verify`` are still states of the sequencer. The build parameters
are ``params.EngineParams``. Commands are checked before they touch anything: a bad command
completes with an error ``Status`` and changes no state.

Memory formats, command and completion fields: docs/engine.md; choices: docs/decisions.md,
"Engine hardware".
"""

from dataclasses import asdict
from types import SimpleNamespace

from amaranth.hdl import Array, Module, Mux, ResetInserter, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.kernels.score_sort import ScoreSortPipeline
from hw.kernels.update_state import UpdateCumuDraftState
from hw.kernels.work_deltas import WorkDeltas
from hw.lib.stream import RegisterSlice

from .begin_round import BeginRound
from .build_verify import BuildVerify
from .command_links import (
    drive_begin_round,
    drive_build_verify,
    drive_load_tree,
    drive_read_state,
    drive_verify,
    link_begin_round,
    link_build_verify,
    link_load_tree,
    link_read_state,
    link_verify,
)
from .commands import (
    ONE_BITS,
    ROOT_SCORE_BITS,
    Opcode,
    Phase,
    Status,
    StopReason,
    clamp_verify_num,
)
from .draft_states import draft_depth_states
from .load_tree import LoadTree, verify_tree_layout
from .memory_ports import (
    PortCounters,
    ReadShare,
    WordReader,
    WordWriter,
    read_port_signature,
    write_port_signature,
)
from .params import EngineParams, counter_layout
from .proba_fetch import store_fetched_probas
from .read_state import ReadState, save_slot_rows, slot_info_layout
from .verify import Verify
from .word_banks import WordBanks

__all__ = ["Opcode", "Status", "StopReason", "EngineParams", "PersistentEngine", "ROOT_SCORE_BITS",
           "ONE_BITS", "counter_layout"]


class PersistentEngine(wiring.Component):
    """The persistent engine, see the module.

    Parameters: the fields of :class:`EngineParams`.

    Members
    -------
    command : In(stream.Signature(command_layout))
        Commands, one at a time (the next is taken after the previous one's completion).
    completion : Out(stream.Signature(completion_layout))
        One completion per command, after its memory writes have their responses.
    config : In(config_layout)
        Static settings.
    read : Out(read_port_signature(address_width, port_bits))
    result_write : Out(write_port_signature(address_width, port_bits))
    mask_write : Out(write_port_signature(address_width, port_bits))
    table_write : Out(write_port_signature(address_width, port_bits))
    logits : Out(read_port_signature(address_width, logit_port_bits)).array(logit_ports)
    counters : Out(data.ArrayLayout(counter_layout, len(port_names)))
        Per port, in ``port_names`` order.
    """

    def __init__(self, **parameters):
        self._params = p = EngineParams(**parameters)
        super().__init__({
            "command": In(stream.Signature(p.command_layout)),
            "completion": Out(stream.Signature(p.completion_layout)),
            "config": In(p.config_layout),
            "read": Out(read_port_signature(p.address_width, p.port_bits)),
            "result_write": Out(write_port_signature(p.address_width, p.port_bits)),
            "mask_write": Out(write_port_signature(p.address_width, p.port_bits)),
            "table_write": Out(write_port_signature(p.address_width, p.port_bits)),
            "logits": Out(p.verify.read_port).array(p.logit_ports),
            "counters": Out(data.ArrayLayout(counter_layout, len(p.port_names))),
        })

    @property
    def params(self) -> EngineParams:
        return self._params

    def elaborate(self, platform):
        p = self._params
        m = Module()
        K, WM, NM, MI = p.node_top_k, p.max_tree_width, p.max_candidates, p.max_input_size
        MAXB, MAXV, MAXN = p.max_batch, p.max_verify_num, p.max_node_count
        R, F = p.argument_words, p.frontier_words

        # --- kernels and ports ---------------------------------------------------------------
        # The watchdog's abort resets every kernel and port run (their logic, not their
        # memories) in the clock it cuts a command off.
        abort = Signal()

        def kernel(name, component):
            m.submodules[name] = ResetInserter(abort)(component)
            return component

        k1 = kernel("k1", ScoreSortPipeline(**asdict(p.k1)))
        k2 = kernel("k2", UpdateCumuDraftState(**asdict(p.k2)))
        # The sequencer's commands to K2's host port pass a register slice: its state decode
        # and K2's address and write-enable logic behind it do not fit one clock together.
        host_slice = kernel("host_slice", RegisterSlice(k2.host_cmd.payload.shape()))
        wiring.connect(m, host_slice.o, k2.host_cmd)
        host_cmd = host_slice.i
        host_idle = ~host_slice.o.valid & host_slice.i.ready  # no command waits for K2
        k3 = kernel("k3", WorkDeltas(**asdict(p.k3)))
        lanes = p.port_bits // 32  # words of a memory port's beat
        port_args = dict(address_width=p.address_width, port_bits=p.port_bits,
                         max_words=p.max_run_words)
        # the sequencer's reader: up to four runs wait behind the one streaming out
        # (build_verify's table rows)
        reader = kernel("reader", WordReader(**port_args, runs=4))
        # draft_depth's top-K probabilities, read beside the other runs (docs/engine.md)
        proba_reader = kernel("proba_reader", WordReader(**port_args))
        read_share = kernel("read_share", ReadShare(address_width=p.address_width,
                                                    port_bits=p.port_bits))
        # a frontier or tree record a transfer, or the rest of a read beat (kv_indices' table
        # prefixes)
        rwriter = kernel("result_writer", WordWriter(**port_args,
                                                     group_words=p.result_group_words))
        mwriter = kernel("mask_writer", WordWriter(**port_args))
        twriter = kernel("table_writer", WordWriter(**port_args, group_words=lanes))
        wiring.connect(m, reader.port, read_share.masters[0])
        wiring.connect(m, proba_reader.port, read_share.masters[1])
        wiring.connect(m, read_share.port, wiring.flipped(self.read))
        wiring.connect(m, rwriter.port, wiring.flipped(self.result_write))
        wiring.connect(m, twriter.port, wiring.flipped(self.table_write))
        wiring.connect(m, mwriter.port, wiring.flipped(self.mask_write))
        # the fused verify, K7 and the compaction (the verify command)
        verify = kernel("verify", Verify(p))
        for port in range(p.logit_ports):
            wiring.connect(m, verify.logits[port], wiring.flipped(self.logits[port]))
        # (port, its data beats' channel, busy, bits per beat) in `port_names` order
        counted = {"read": (self.read.r, reader.busy | proba_reader.busy, p.port_bits),
                   "result_write": (self.result_write.w, rwriter.busy, p.port_bits),
                   "mask_write": (self.mask_write.w, mwriter.busy, p.port_bits),
                   "table_write": (self.table_write.w, twriter.busy, p.port_bits),
                   **{f"logits{port}": (self.logits[port].r, verify.tv_busy,
                                        p.logit_port_bits)
                      for port in range(p.logit_ports)}}
        for index, name in enumerate(p.port_names):
            beat, busy, bits = counted[name]
            m.submodules[f"{name}_counters"] = counters = PortCounters(port_bits=bits)
            m.d.comb += [counters.beat.eq(beat.valid & beat.ready), counters.busy.eq(busy)]
            m.d.comb += [self.counters[index][field].eq(getattr(counters, field))
                         for field in ("beats", "bytes", "busy_cycles", "stall_cycles")]

        # --- on-chip round state -------------------------------------------------------------
        def memory(name, shape, depth):
            mem = m.submodules[name] = Memory(shape=shape, depth=depth, init=[])
            return mem.read_port(), mem.write_port()

        # The batch's inputs in two banks: begin_round fills the idle one and swaps only
        # once its checks pass, so a refused begin_round leaves the round in flight intact.
        slot_rd, slot_wr = memory("batch_slot", range(MAXB), 2 * MAXB)
        seq_mem = m.submodules.batch_seq_len = Memory(shape=32, depth=2 * MAXB, init=[])
        seq_rd, seq_wr = seq_mem.read_port(), seq_mem.write_port()
        seq_k4_rd, seq_mask_rd = seq_mem.read_port(), seq_mem.read_port()  # K4's feeds
        pool_rd, pool_wr = memory("batch_pool", 32, 2 * MAXB)
        kv_rd, kv_wr = memory("batch_kv_slots", 32, 2 * MAXB * p.kv_slots)
        root_rd, root_wr = memory("batch_root", 32, MAXB)
        fscore_rd, fscore_wr = memory("frontier_score", 32, MAXB * WM)
        fnode_rd, fnode_wr = memory("frontier_node", 32, MAXB * WM)
        fmask_rd, fmask_wr = memory("frontier_mask", max(1, MI), MAXB * WM)
        # the depth's tokens, b * n + x, written a read beat a clock
        tokens = m.submodules.draft_tokens = WordBanks(depth=MAXB * NM, lanes=lanes)
        token_at = Signal(range(MAXB * NM + lanes))
        cache_rd, cache_wr = memory("k1_cache", data.ArrayLayout(32, K), MAXB)
        parent_rd, parent_wr = memory("k1_parents", data.ArrayLayout(k1.parent_width, K), MAXB)
        pool_seen_rd, pool_seen_wr = memory("pool_seen", 1, p.max_pool_rows)
        # the verify KV slots, stored and copied out a read beat a clock (and K7's copy)
        locs = m.submodules.verify_cache_locs = WordBanks(depth=MAXB * MAXV, lanes=lanes)
        locs2 = m.submodules.verify_cache_locs_k7 = WordBanks(depth=MAXB * MAXV, lanes=lanes)
        vtree_rd, vtree_wr = memory("verify_tree", verify_tree_layout, MAXB * MAXV)
        # Per slot: what its last round left (written when a new round begins; `saved` says
        # which slots have such a record since reset, as memories keep their contents through
        # a reset) and its row in the round in flight (`in_round` says which slots that round
        # has).
        info_rd, info_wr = memory("slot_info", slot_info_layout, MAXB)
        slot_row_rd, slot_row_wr = memory("slot_row", range(MAXB), MAXB)
        in_round = Signal(MAXB)
        saved = Signal(MAXB)
        saving, saving_slot = Signal(), Signal(range(MAXB))  # a slot's row is saved
        with m.If(saving):
            m.d.sync += saved.eq(saved | (1 << saving_slot))

        cmd = Signal(p.command_layout)
        status = Signal(3)
        stop_reason = Signal(3)
        next_width = Signal(range(WM + 1))

        phase = Signal(2)  # _Phase of the round
        bank = Signal()  # the round's bank of the batch memories
        depths_run = Signal(8)
        stop_kind = Signal(3)  # StopReason that ended drafting
        batch = Signal(range(MAXB + 1))
        verify_num = Signal(signed(32))
        depths = Signal(8)
        depth = Signal(8)  # label of the frontier's depth
        width = Signal(range(WM + 1))  # frontier width W
        input_count = Signal(range(p.kv_slots + WM + 1))
        cumu_count = Signal(range(MAXN + NM + 1))
        # Loop bounds less one, each set in the clock its count is (a counter compared with a
        # register: no subtraction's carry chain in front of the counters' next-state logic).
        # Signed, so that a zero count's -1 matches no counter.
        cumu_last = Signal(range(-1, MAXN + NM), init=-1)  # cumu_count - 1
        n_last = Signal(range(-1, NM), init=-1)  # n - 1
        vn_last = Signal(range(-1, MAXV), init=-1)  # vn - 1
        request_last = Signal(range(-1, p.verify_request_words + MAXV),  # words of a verify
                              init=p.verify_request_words - 1)  # request record, less one
        ws_last = Signal(range(-1, MAXV + K), init=-1)  # ws0 + K - 1: K3's scores per row, less one

        b = Signal(range(MAXB + 2))  # request of the batch (up to B + 1: the indptrs' entries)
        # the largest loop bound of the commands (a full tree's nodes and both score rows)
        elements = max(R, NM, MAXV + K, WM * F, MAXN + 2 * MAXV + K)
        i = Signal(range(elements + 2))  # element within it
        j = Signal(range(elements + 2))  # second element counter
        n = Signal(range(NM + 1))  # N = W*K
        bad_argument = Signal()
        probas = Array(Signal(32, name=f"proba{t}") for t in range(NM))
        fetching = Signal()  # a read of top-K probabilities into `probas` runs
        fetched_ahead = Signal()  # it was started before the request's DRAFT_PROBAS
        proba_index = Signal(range(NM + 1))
        parent_scores = Array(Signal(32, name=f"parent_score{w}") for w in range(WM))
        result = Signal(k1.result_layout)
        vn = Signal(range(MAXV + 1))  # n, the verify-set size
        rows_read = Signal(32)  # verify's completion: the logits rows read
        active_count = Signal(16)  # and the requests left active

        cfg = self.config

        def row(index, *, new=False):
            """Address of batch row ``index`` in the round's bank (``new``: the other)."""
            return Mux(bank ^ new, MAXB, 0) + index

        def kv_row(index, x, *, new=False):
            return row(index, new=new) * p.kv_slots + x

        def verify_size_is(value):
            """The statements that set ``vn`` and the loop bounds that follow it."""
            return [vn.eq(value), vn_last.eq(value - 1),
                    request_last.eq(value + (p.verify_request_words - 1))]

        def clamp_verify(value):
            return clamp_verify_num(value, MAXV)

        # Memories are read a clock ahead: by default the batch row ``b``'s slot.
        m.d.comb += slot_rd.addr.eq(row(b))
        m.d.comb += [
            k2.req.payload.slot.eq(slot_rd.data),
            k2.req.payload.tree_width.eq(width),
            k2.req.payload.input_count.eq(input_count),
            k2.req.payload.cumu_count.eq(cumu_count),
            k2.req.payload.verify_num.eq(verify_num),
            k2.req.payload.curr_depth.eq(depth),
        ]

        # Every local above, for the states of each command (functions below the class).
        c = SimpleNamespace(**{name: value for name, value in locals().items()
                               if name not in ("self", "platform", "m")})
        # The watchdog: clocks left to the command in flight (docs/engine.md, "The watchdog")
        remaining = Signal(range(p.watchdog_cycles + 1))
        expired = Signal()  # remaining reached 0 a clock ago
        limit = Mux(cfg.watchdog_cycles != 0, cfg.watchdog_cycles, p.watchdog_cycles)
        # The commands that are components of their own, started and finished by the
        # sequencer (docs/engine.md, "The hardware").
        begin = kernel("begin_round", BeginRound(p))
        link_begin_round(m, begin, self.command.payload, c)
        read_state = kernel("read_state", ReadState(p))
        link_read_state(m, read_state, self.command.payload, c)
        load_tree = kernel("load_tree", LoadTree(p))
        link_load_tree(m, load_tree, self.command.payload, c)
        build = kernel("build_verify", BuildVerify(p))
        link_build_verify(m, build, self.command.payload, c)
        link_verify(m, verify, self.command.payload, c)
        with m.FSM(name="sequencer") as sequencer:
            with m.State("IDLE"):
                m.d.comb += self.command.ready.eq(1)
                for component, opcode in ((begin, Opcode.BEGIN_ROUND),
                                          (read_state, Opcode.READ_STATE),
                                          (load_tree, Opcode.LOAD_TREE),
                                          (build, Opcode.BUILD_VERIFY),
                                          (verify, Opcode.VERIFY)):
                    m.d.comb += component.start.valid.eq(
                        self.command.valid & (self.command.payload.opcode == opcode))
                with m.If(self.command.valid):
                    m.d.sync += [cmd.eq(self.command.payload), status.eq(Status.OK),
                                 fetched_ahead.eq(0),
                                 stop_reason.eq(0), next_width.eq(0), b.eq(0), i.eq(0),
                                 j.eq(0),
                                 bad_argument.eq(0), remaining.eq(limit), expired.eq(0)]
                    with m.Switch(self.command.payload.opcode):
                        with m.Case(Opcode.BEGIN_ROUND):
                            m.next = "BEGIN_ROUND"
                        with m.Case(Opcode.DRAFT_DEPTH):
                            m.next = "DRAFT_CHECK"
                        with m.Case(Opcode.BUILD_VERIFY):
                            m.next = "BUILD_VERIFY"
                        with m.Case(Opcode.VERIFY):
                            m.next = "VERIFY"
                        with m.Case(Opcode.READ_STATE):
                            m.next = "READ_STATE"
                        with m.Case(Opcode.LOAD_TREE):
                            m.next = "LOAD_TREE"
                        with m.Default():
                            m.d.sync += status.eq(Status.BAD_ARGUMENT)
                            m.next = "COMPLETE"

            with m.State("BEGIN_ROUND"):
                drive_begin_round(m, begin, c)
                m.d.comb += begin.done.ready.eq(1)
                with m.If(begin.done.valid):
                    m.d.sync += status.eq(begin.done.payload.status)
                    with m.If(begin.done.payload.status == Status.OK):
                        m.d.sync += [phase.eq(Phase.DRAFTING), batch.eq(cmd.batch_size),
                                     in_round.eq(begin.done.payload.slots), bank.eq(~bank),
                                     depths_run.eq(0), verify_num.eq(cmd.verify_num),
                                     depths.eq(cmd.depths), depth.eq(1), width.eq(1),
                                     input_count.eq(1), cumu_count.eq(1), cumu_last.eq(0)]
                    m.next = "COMPLETE"

            draft_depth_states(m, c)
            with m.State("VERIFY"):
                drive_verify(m, verify, c)
                m.d.comb += verify.done.ready.eq(1)
                with m.If(verify.done.valid):
                    m.d.sync += [status.eq(verify.done.payload.status),
                                 active_count.eq(verify.done.payload.active_count),
                                 rows_read.eq(verify.done.payload.rows_read)]
                    with m.If(verify.done.payload.status == Status.OK):
                        m.d.sync += phase.eq(Phase.IDLE)
                    m.next = "COMPLETE"

            with m.State("BUILD_VERIFY"):
                drive_build_verify(m, build, c)
                m.d.comb += build.done.ready.eq(1)
                with m.If(build.done.valid):
                    m.d.sync += [status.eq(build.done.payload.status),
                                 *verify_size_is(build.done.payload.verify_size)]
                    with m.If(build.done.payload.status == Status.OK):
                        m.d.sync += phase.eq(Phase.BUILT)
                    m.next = "COMPLETE"

            with m.State("LOAD_TREE"):
                drive_load_tree(m, load_tree, c)
                m.d.comb += load_tree.done.ready.eq(1)
                with m.If(load_tree.done.valid):
                    m.d.sync += status.eq(load_tree.done.payload.status)
                    with m.If(load_tree.done.payload.sized):
                        m.d.sync += verify_size_is(cmd.verify_num)
                    with m.If(load_tree.done.payload.status == Status.OK):
                        m.d.sync += [phase.eq(Phase.BUILT), depths_run.eq(cmd.depths)]
                    m.next = "COMPLETE"

            with m.State("READ_STATE"):
                drive_read_state(m, read_state, c)
                m.d.comb += read_state.done.ready.eq(1)
                with m.If(read_state.done.valid):
                    m.d.sync += [status.eq(read_state.done.payload.status), i.eq(0), j.eq(0)]
                    m.next = "COMPLETE"

            with m.State("WATCHDOG_SAVE"):
                # The command was cut off (its kernels reset): the round in flight ends
                # where its last completed command left it.
                m.d.comb += [slot_rd.addr.eq(row(b)), seq_rd.addr.eq(row(b)),
                             pool_rd.addr.eq(row(b))]
                with m.If(save_slot_rows(m, index=b, step=j, batch=batch, slot=slot_rd.data,
                                         seq_len=seq_rd.data, pool=pool_rd.data, phase=phase,
                                         cumu_count=cumu_count, info_at=info_wr.addr,
                                         info_write=info_wr.data, info_en=info_wr.en,
                                         saved_slot=saving_slot, saved_en=saving)):
                    m.d.sync += [phase.eq(Phase.IDLE), in_round.eq(0),
                                 status.eq(Status.WATCHDOG), b.eq(0), j.eq(0)]
                    m.next = "COMPLETE"

            with m.State("COMPLETE"):
                out = self.completion.payload
                m.d.comb += [self.completion.valid.eq(1), out.tag.eq(cmd.tag),
                             out.opcode.eq(cmd.opcode), out.status.eq(status),
                             out.next_tree_width.eq(next_width),
                             out.stop_reason.eq(stop_reason), out.verify_size.eq(vn),
                             out.active_count.eq(active_count), out.rows_read.eq(rows_read)]
                with m.If(self.completion.ready):
                    m.next = "IDLE"

        store_fetched_probas(m, c)
        waiting = sequencer.ongoing("IDLE") | sequencer.ongoing("COMPLETE") \
            | sequencer.ongoing("WATCHDOG_SAVE")
        m.d.sync += abort.eq(0)
        with m.If(~waiting):
            m.d.sync += [remaining.eq(remaining - (remaining != 0)), expired.eq(remaining == 0)]
            with m.If(expired):  # after the command's own statements: this transition wins
                m.d.sync += [sequencer.state.eq(sequencer.encoding["WATCHDOG_SAVE"]),
                             abort.eq(1), b.eq(0), j.eq(0), expired.eq(0)]
        return m
