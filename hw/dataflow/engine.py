"""The persistent engine (docs/kernels.md §11, docs/engine.md): commands in, tree state on chip.

``DraftEngine`` is the draft side of the engine: it executes ``begin_round`` and
``draft_depth`` commands (docs/engine.md, "Commands") bit-exact with ``golden.engine.Engine``.
Every slot's cumulative tree, ``sort_scores``, ``work_scores`` and draft mask stay in K2's
on-chip memories (``hw.kernels.update_state``) for the whole round; the round's batch, its
frontier (scores, node ids, mask rows) and the draft inputs' KV slots stay in the engine's own
memories. Only model-facing data crosses the memory ports: the command's argument records and
the draft model's top-K in (``read``), the next frontier out (``result_write``), the KV
slots of the round into ``req_to_token`` (``table_write``); each port has its
``PortCounters``.

A ``draft_depth`` runs, per request of the batch: its ``N = W*K`` probabilities into K1's score
and sort path (``ScoreSortPipeline``), the result and the tokens into K2 (in place), and at
depth 1 the raw probabilities into the new nodes' ``cumu_scores`` (as ``golden.draft_round``);
then K3 on every request's ``work_scores`` prefix, read straight from K2's memories, gives the
width policy's ``W'`` (or the command gives the width), and the stop rules decide whether the
round drafts on. Commands are checked before they touch anything: a bad command completes
with an error ``Status`` and changes no state and no memory.

Memory formats, command and completion fields, cycle figures: docs/engine.md.
"""

import enum
from dataclasses import asdict, dataclass
from functools import cached_property

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.kernels.active_slots import ActiveSlots
from hw.kernels.score_sort import SORT_WIDTHS, ScoreSortParams, ScoreSortPipeline
from hw.kernels.tree_mask import TreeMask, TreeMaskMode, TreeMaskParams
from hw.kernels.tree_verify import TreeVerify, TreeVerifyParams
from hw.kernels.update_state import Region, UpdateCumuDraftState, UpdateStateParams
from hw.kernels.verify_result import VerifyResult, VerifyResultParams
from hw.kernels.work_deltas import WorkDeltas, WorkDeltasParams
from hw.lib.params import ParameterRecord, index_bits, parameter

from .mask_bytes import MaskBytes
from .memory_ports import (
    COUNTER_BITS,
    PortCounters,
    WordReader,
    WordWriter,
    read_port_signature,
    write_port_signature,
)

__all__ = ["Opcode", "Status", "StopReason", "EngineParams", "DraftEngine", "ROOT_SCORE_BITS",
           "ONE_BITS", "counter_layout"]

#: 1.001f, the root's score (``golden.draft_round.ROOT_SCORE``).
ROOT_SCORE_BITS = 0x3F80_20C5
#: 1.0f, the frontier score of the root at depth 1.
ONE_BITS = 0x3F80_0000


class Opcode(enum.IntEnum):
    """``command.opcode``."""

    BEGIN_ROUND = 1
    DRAFT_DEPTH = 2
    BUILD_VERIFY = 3
    VERIFY = 4


class Status(enum.IntEnum):
    """``completion.status``: the codes of ``golden.engine.Status``."""

    OK = 0
    BAD_SLOT = 1
    BAD_WIDTH = 2
    BAD_PHASE = 3
    NODE_BUDGET = 4
    BAD_ARGUMENT = 5


class StopReason(enum.IntEnum):
    """``completion.stop_reason`` of ``draft_depth`` (``golden.draft_round`` stop rules)."""

    NONE = 0
    WIDTH_ZERO = 1
    DEPTHS = 2
    NODE_BUDGET = 3
    INPUT_BUDGET = 4


class _Phase(enum.IntEnum):
    IDLE = 0
    DRAFTING = 1
    DRAFTED = 2
    BUILT = 3


counter_layout = data.StructLayout({"beats": COUNTER_BITS, "bytes": COUNTER_BITS,
                                    "busy_cycles": COUNTER_BITS, "stall_cycles": COUNTER_BITS})


@dataclass(frozen=True)
class EngineParams(ParameterRecord):
    """Validated build parameters of :class:`DraftEngine` and its port layouts."""

    node_top_k: int = parameter(8, "``K``.", hi=16)
    max_tree_width: int = parameter(8, "Largest frontier width ``W``.", hi="node_top_k")
    max_depths: int = parameter(8, "Depth labels per round.", hi=255)
    max_verify_num: int = parameter(64, "``MAXV``.")
    max_node_count: int = parameter(1024, "``MAXN``: nodes per slot.")
    max_input_size: int = parameter(64, "``MI``: draft-model inputs per round besides the root.")
    max_batch: int = parameter(128, "Request slots held on chip (and largest batch).",
                               hi=1 << 15)
    sort_width: int = parameter(64, "Lanes of K1's sorting network.", choices=SORT_WIDTHS)
    max_pool_rows: int = parameter(4096, "Largest ``req_to_token`` row count ``P``.")
    address_width: int = parameter(32, "Bits of byte addresses.", lo=16, hi=64)
    port_bits: int = parameter(256, "Data bits per beat of every memory port.", lo=32,
                               hi=1024, power_of_two=True)
    mask_lanes: int = parameter(64, "Mask columns per K4 mask word.", lo=8, hi=1024,
                                power_of_two=True)
    max_seq_len: int = parameter(1 << 16, "Largest ``seq_len`` (sizes the FULL mask rows).")
    max_vocab_size: int = parameter(131072, "Largest ``V`` the fused verify reads.",
                                    hi=1 << 24)
    logit_ports: int = parameter(2, "The fused verify's ``target_logits`` read ports.",
                                 hi=64, power_of_two=True)
    logit_port_bits: int = parameter(256, "Data bits per beat of a logits port.", lo=64,
                                     hi=1024, power_of_two=True)
    logit_format: str = parameter("float32", "Element type of ``target_logits``.",
                                  choices=("float32", "bfloat16"))

    def check(self):
        UpdateStateParams(**self._k2_fields())
        self.k4  # noqa: B018 (checks MAXV <= MAXN)
        self.verify  # noqa: B018
        ScoreSortParams(node_top_k=self.node_top_k, max_tree_width=self.max_tree_width,
                        sort_width=self.sort_width)

    def _k2_fields(self):
        return dict(node_top_k=self.node_top_k, max_tree_width=self.max_tree_width,
                    max_node_count=self.max_node_count, max_verify_num=self.max_verify_num,
                    max_input_size=self.max_input_size, max_batch=self.max_batch,
                    token_width=32,
                    index_width=max(32, (self.max_node_count + self.max_candidates)
                                    .bit_length() + 1))

    @cached_property
    def k2(self) -> UpdateStateParams:
        return UpdateStateParams(**self._k2_fields())

    @cached_property
    def k1(self) -> ScoreSortParams:
        return ScoreSortParams(node_top_k=self.node_top_k, max_tree_width=self.max_tree_width,
                               sort_width=self.sort_width)

    @cached_property
    def k4(self) -> TreeMaskParams:
        return TreeMaskParams(max_node_count=self.max_node_count,
                              max_verify_num=self.max_verify_num, mask_lanes=self.mask_lanes,
                              max_batch_size=self.max_batch)

    @cached_property
    def verify(self) -> TreeVerifyParams:
        return TreeVerifyParams(
            max_nodes=max(2, self.max_verify_num), max_steps=self.max_steps,
            max_vocab_size=self.max_vocab_size, read_ports=self.logit_ports,
            port_bits=self.logit_port_bits, logit_format=self.logit_format,
            address_width=self.address_width)

    @cached_property
    def k7(self) -> VerifyResultParams:
        return VerifyResultParams(max_draft_tokens=self.max_verify_num,
                                  max_speculative_tokens=self.max_steps,
                                  max_batch_size=self.max_batch)

    @property
    def max_steps(self) -> int:
        """Largest ``S``: depths run + 1."""
        return max(2, self.max_depths + 1)

    #: Header words of a verify request record (temperature, top_k, top_p, seed or final
    #: coin, max_seq_len; then its ``n`` coins) and of a verify result record.
    verify_request_words = 5
    verify_result_words = 10

    @cached_property
    def k3(self) -> WorkDeltasParams:
        return WorkDeltasParams(node_top_k=self.node_top_k, max_verify_num=self.max_verify_num,
                                lanes=1, max_batch_size=self.max_batch)

    @property
    def max_candidates(self) -> int:
        """``N_max = max_tree_width * K``."""
        return self.max_tree_width * self.node_top_k

    @property
    def kv_slots(self) -> int:
        """Draft inputs per round, the root included: ``MI + 1``."""
        return self.max_input_size + 1

    @property
    def argument_words(self) -> int:
        """Words of one ``begin_round`` argument record: slot, root token, sequence length,
        ``req_to_token`` row, then the ``MI + 1`` draft KV slots."""
        return 4 + self.kv_slots

    @property
    def mask_words(self) -> int:
        """Words of one frontier mask row (``MI`` columns, bit ``j`` of word ``j // 32``)."""
        return max(1, -(-self.max_input_size // 32))

    @property
    def frontier_words(self) -> int:
        """Words of one frontier record: token, parent index, node id, position, KV slot,
        then the mask row."""
        return 5 + self.mask_words

    #: Words of one verify-tree record: ``retrive_index``, ``retrive_next_token``,
    #: ``retrive_next_sibling``, ``position``, ``draft_token``.
    tree_words = 5

    @property
    def max_run_words(self) -> int:
        """Longest run of words a port moves for one command."""
        v = self.max_verify_num
        return self.max_batch * max(self.argument_words, self.max_candidates,
                                    self.max_tree_width * self.frontier_words,
                                    v * self.tree_words, self.max_seq_len + v,
                                    -(-v * (self.max_seq_len + v) // 4))

    @cached_property
    def command_layout(self) -> data.StructLayout:
        """One command: ``opcode``, ``tag`` (returned in the completion), ``batch_size``,
        ``verify_num``, ``depths`` (``begin_round``), ``width`` with ``width_given``
        (``draft_depth``'s override), three byte addresses (``begin_round``: ``address0`` the
        argument records; ``draft_depth``: ``address0`` the probabilities, ``address1`` the
        tokens, ``address2`` the frontier records)."""
        a = self.address_width
        return data.StructLayout({
            "opcode": 4, "tag": 16, "batch_size": 16, "verify_num": signed(32),
            "depths": 8, "width": 8, "width_given": 1, "tree_mask_mode": 2,
            "lfsr": 1, "eos_token_id": signed(32), "threshold_single": 32,
            "threshold_acc": 32, "row_pitch": a,
            "address0": a, "address1": a, "address2": a, "address3": a, "address4": a,
        })

    @cached_property
    def completion_layout(self) -> data.StructLayout:
        """One completion: the command's ``tag`` and ``opcode``, ``status``, and for
        ``draft_depth`` the ``next_tree_width`` and ``stop_reason``."""
        return data.StructLayout({"tag": 16, "opcode": 4, "status": 3, "next_tree_width": 8,
                                  "stop_reason": 3, "verify_size": 16, "active_count": 16,
                                  "rows_read": 32})

    @cached_property
    def config_layout(self) -> data.StructLayout:
        """Static settings (written through the control registers while idle):
        ``req_to_token`` (byte address of the int32 table), ``pool_rows`` ``P``,
        ``context_len`` ``C`` (words per table row), ``vocab_size`` ``V``,
        ``cost_per_node`` (float32 bits)."""
        return data.StructLayout({
            "req_to_token": self.address_width, "pool_rows": 32, "context_len": 32,
            "vocab_size": 32, "cost_per_node": 32,
        })

    @property
    def port_names(self) -> tuple[str, ...]:
        """The memory ports, in counter order."""
        return ("read", "result_write", "mask_write", "table_write") + tuple(
            f"logits{port}" for port in range(self.logit_ports))


class DraftEngine(wiring.Component):
    """The engine's draft side (``begin_round``, ``draft_depth``), see the module.

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
    table_write : Out(write_port_signature(address_width, port_bits))
    counters : Out(data.ArrayLayout(counter_layout, 3))
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

    def elaborate(self, platform):  # noqa: C901 (one sequencer, its states in order)
        p = self._params
        m = Module()
        K, WM, NM, MI = p.node_top_k, p.max_tree_width, p.max_candidates, p.max_input_size
        MAXB, MAXV, MAXN = p.max_batch, p.max_verify_num, p.max_node_count
        R, F = p.argument_words, p.frontier_words

        # --- kernels and ports ---------------------------------------------------------------
        m.submodules.k1 = k1 = ScoreSortPipeline(**asdict(p.k1))
        m.submodules.k2 = k2 = UpdateCumuDraftState(**asdict(p.k2))
        m.submodules.k3 = k3 = WorkDeltas(**asdict(p.k3))
        port_args = dict(address_width=p.address_width, port_bits=p.port_bits,
                         max_words=p.max_run_words)
        m.submodules.reader = reader = WordReader(**port_args)
        m.submodules.result_writer = rwriter = WordWriter(**port_args)
        m.submodules.mask_writer = mwriter = WordWriter(**port_args)
        m.submodules.table_writer = twriter = WordWriter(**port_args)
        m.submodules.k4 = k4 = TreeMask(**asdict(p.k4))
        m.submodules.mask_bytes = mask_bytes = MaskBytes(
            mask_lanes=p.mask_lanes, max_columns=p.max_seq_len + MAXV)
        wiring.connect(m, mask_bytes.words, mwriter.words)
        wiring.connect(m, reader.port, wiring.flipped(self.read))
        wiring.connect(m, rwriter.port, wiring.flipped(self.result_write))
        wiring.connect(m, twriter.port, wiring.flipped(self.table_write))
        wiring.connect(m, mwriter.port, wiring.flipped(self.mask_write))
        m.submodules.verify = tv = TreeVerify(**asdict(p.verify))
        m.submodules.k7 = k7 = VerifyResult(**asdict(p.k7))
        m.submodules.active = active = ActiveSlots(max_batch_size=MAXB)
        for port in range(p.logit_ports):
            wiring.connect(m, tv.read[port], wiring.flipped(self.logits[port]))
        tv_busy = Signal()  # the fused verify has a request in flight
        for index, (name, unit, beat) in enumerate((
                ("read", reader, self.read.r), ("result_write", rwriter, self.result_write.w),
                ("mask_write", mwriter, self.mask_write.w),
                *((f"logits{port}", None, self.logits[port].r)
                  for port in range(p.logit_ports)),
                ("table_write", twriter, self.table_write.w))):
            m.submodules[f"{name}_counters"] = counters = PortCounters(port_bits=p.port_bits)
            busy = unit.busy if unit is not None else tv_busy
            m.d.comb += [counters.beat.eq(beat.valid & beat.ready), counters.busy.eq(busy)]
            m.d.comb += [self.counters[index][field].eq(getattr(counters, field))
                         for field in ("beats", "bytes", "busy_cycles", "stall_cycles")]
        words = reader.words

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
        token_rd, token_wr = memory("draft_tokens", 32, MAXB * NM)
        cache_rd, cache_wr = memory("k1_cache", data.ArrayLayout(32, K), MAXB)
        parent_rd, parent_wr = memory("k1_parents", data.ArrayLayout(k1.parent_width, K), MAXB)
        pool_seen_rd, pool_seen_wr = memory("pool_seen", 1, p.max_pool_rows)
        locs_rd, locs_wr = memory("verify_cache_locs", 32, MAXB * MAXV)
        locs2_rd, locs2_wr = memory("verify_cache_locs_k7", 32, MAXB * MAXV)  # K7's copy
        tree_layout = data.StructLayout({"token": 32, "index": 32, "next": signed(16),
                                         "sibling": signed(16)})
        vtree_rd, vtree_wr = memory("verify_tree", tree_layout, MAXB * MAXV)
        VQ = p.verify_request_words + MAXV
        vreq_mem = m.submodules.verify_requests = Memory(shape=32, depth=MAXB * VQ, init=[])
        vreq_rd, vreq_wr = vreq_mem.read_port(), vreq_mem.write_port()
        coin_rd = vreq_mem.read_port()
        predicts_rd, predicts_wr = memory("predicts", 32, MAXB * MAXV)
        vids_rd, vids_wr = memory("verified_ids", 32, MAXB * p.max_steps)
        commit_rd, commit_wr = memory("commit_locs", 32, p.max_steps)
        vres_layout = data.StructLayout({
            "accept_token_num": 8, "accept_length": 8, "next_root": 32, "finished": 1,
            "seq_len": 32, "nan": 1, "offset": 32, "rows": 16, "evict": MAXV})
        vres_rd, vres_wr = memory("verify_results", vres_layout, MAXB)
        accept_layout = data.ArrayLayout(32, p.max_steps)
        accidx_rd, accidx_wr = memory("accept_index", accept_layout, MAXB)
        inverse_rd, inverse_wr = memory("active_inverse", 32, MAXB)
        aslot_rd, aslot_wr = memory("active_slots", 32, MAXB)

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

        b = Signal(range(MAXB + 1))  # request of the batch
        i = Signal(range(max(R, NM, MAXV + K, WM * F, MAXN) + 2))  # element within it
        j = Signal(range(max(R, NM, MAXV + K, WM * F, MAXN) + 2))  # second element counter
        n = Signal(range(NM + 1))  # N = W*K
        slot_seen = Signal(MAXB)
        bad_slot = Signal()
        bad_argument = Signal()
        record = Signal(4 * 32)  # slot, root token, seq_len, pool of the record being read
        probas = Array(Signal(32, name=f"proba{t}") for t in range(NM))
        parent_scores = Array(Signal(32, name=f"parent_score{w}") for w in range(WM))
        result = Signal(k1.result_layout)
        ws_len = Signal(range(MAXV + K + 1))  # ws0 + K
        out_node = Signal(k2.host_response_layout)
        vn = Signal(range(MAXV + 1))  # n, the verify-set size
        mode = Signal(2)
        mask_total = Signal(range(p.max_run_words * 4 + 1))  # bytes of the mask array
        kv_total = Signal(range(p.max_run_words + 1))  # words of kv_indices
        running = Signal(range(p.max_run_words * 4 + 1))  # a running sum
        invalid = Signal()
        k4_cmd_sent = Signal()
        seq_b = Signal(range(MAXB + 1))  # K4's seq_lens feed
        mask_b = Signal(range(MAXB + 1))  # request of the mask rows arriving
        mask_rows = Signal(range(MAXV + 1))
        flushed = Signal()
        trees = Signal(range(MAXB * MAXV + 1))  # tree records written
        tree_word = Signal(range(p.tree_words))
        rsp_x = Signal(range(MAXN + 1))  # node answers forwarded in the current request
        steps = Signal(range(p.max_steps + 1))  # S
        accepted = Signal(8)
        accept_row = Signal(accept_layout)
        verified_total = Signal(32)
        rows_read = Signal(32)
        active_count = Signal(16)
        res = Signal(vres_layout)
        VQH = p.verify_request_words
        header = Array(Signal(32, name=f"verify_header{x}") for x in range(VQH))

        cfg = self.config
        words_taken = words.valid & words.ready

        def row(index, *, new=False):
            """Address of batch row ``index`` in the round's bank (``new``: the other)."""
            return Mux(bank ^ new, MAXB, 0) + index

        def kv_row(index, x, *, new=False):
            return row(index, new=new) * p.kv_slots + x

        def unit_interval(bits):
            """Whether float32 ``bits`` is a number in [0, 1] (-0.0 included, NaN not)."""
            return (bits[:31] <= ONE_BITS) & (~bits[31] | (bits[:31] == 0))

        def clamp_verify(value):
            return Mux(value < 1, 1, Mux(value > MAXV, MAXV, value))

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

        with m.FSM(name="sequencer"):
            with m.State("IDLE"):
                m.d.comb += self.command.ready.eq(1)
                with m.If(self.command.valid):
                    m.d.sync += [cmd.eq(self.command.payload), status.eq(Status.OK),
                                 stop_reason.eq(0), next_width.eq(0), b.eq(0), i.eq(0),
                                 j.eq(0), slot_seen.eq(0), bad_slot.eq(0),
                                 bad_argument.eq(0)]
                    with m.Switch(self.command.payload.opcode):
                        with m.Case(Opcode.BEGIN_ROUND):
                            m.next = "BEGIN_CHECK"
                        with m.Case(Opcode.DRAFT_DEPTH):
                            m.next = "DRAFT_CHECK"
                        with m.Case(Opcode.BUILD_VERIFY):
                            m.next = "VERIFY_CHECK"
                        with m.Case(Opcode.VERIFY):
                            m.next = "RUN_CHECK"
                        with m.Default():
                            m.d.sync += status.eq(Status.BAD_ARGUMENT)
                            m.next = "COMPLETE"

            # --- begin_round -------------------------------------------------------------
            with m.State("BEGIN_CHECK"):
                with m.If(cmd.batch_size > MAXB):
                    m.d.sync += status.eq(Status.BAD_SLOT)
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [reader.start.eq(1), reader.address.eq(cmd.address0),
                                 reader.count.eq(cmd.batch_size * R)]
                    m.next = "BEGIN_READ"

            with m.State("BEGIN_READ"):
                # Record b, word i: slot, root token, seq_len, pool row, then the KV slots.
                m.d.comb += words.ready.eq(1)
                value = words.payload
                with m.If(words_taken):
                    m.d.sync += i.eq(Mux(i == R - 1, 0, i + 1))
                    with m.If(i < 4):
                        m.d.sync += record.word_select(i[:2], 32).eq(value)
                    with m.Else():
                        m.d.comb += [kv_wr.addr.eq(kv_row(b, i - 4, new=True)),
                                     kv_wr.data.eq(value), kv_wr.en.eq(1)]
                    with m.If(i == R - 1):
                        m.d.sync += b.eq(b + 1)
                    with m.If(i == 4):  # the first four words are in: check and store them
                        slot_v = record.word_select(0, 32)
                        root_v = record.word_select(1, 32)
                        seq_v = record.word_select(2, 32)
                        pool_v = record.word_select(3, 32)
                        in_range = slot_v < MAXB
                        with m.If(~in_range | (slot_seen.bit_select(slot_v[:index_bits(MAXB)], 1)
                                               & in_range)):
                            m.d.sync += bad_slot.eq(1)
                        with m.Else():
                            m.d.sync += slot_seen.eq(
                                slot_seen | (1 << slot_v[:index_bits(MAXB)]))
                        room = Const(max(p.kv_slots, MAXV), 33)
                        with m.If((root_v >= cfg.vocab_size) | (pool_v >= cfg.pool_rows)
                                  | (pool_v >= p.max_pool_rows)
                                  | (seq_v[31]) | (seq_v + room > cfg.context_len)):
                            m.d.sync += bad_argument.eq(1)
                        new_row = row(b, new=True)
                        m.d.comb += [slot_wr.addr.eq(new_row), slot_wr.data.eq(slot_v),
                                     slot_wr.en.eq(1), seq_wr.addr.eq(new_row),
                                     seq_wr.data.eq(seq_v), seq_wr.en.eq(1),
                                     pool_wr.addr.eq(new_row), pool_wr.data.eq(pool_v),
                                     pool_wr.en.eq(1), root_wr.addr.eq(b), root_wr.data.eq(root_v),
                                     root_wr.en.eq(1)]
                with m.If(~reader.busy & ~words.valid & (b == cmd.batch_size)):
                    m.d.sync += [b.eq(0), i.eq(0)]
                    m.next = "BEGIN_POOLS"

            with m.State("BEGIN_POOLS"):
                # Repeated pool rows: a bitmap over the rows, set here and cleared in
                # BEGIN_CLEAR (2 clocks per request: read the row, then test and set).
                m.d.comb += pool_rd.addr.eq(row(b, new=True))
                with m.If(b == cmd.batch_size):
                    m.d.sync += b.eq(0)
                    m.next = "BEGIN_CLEAR"
                with m.Elif(i == 0):
                    m.d.sync += i.eq(1)
                with m.Elif(i == 1):
                    m.d.comb += pool_seen_rd.addr.eq(pool_rd.data)
                    m.d.sync += i.eq(2)
                with m.Else():
                    row_ok = pool_rd.data < p.max_pool_rows
                    with m.If(row_ok & pool_seen_rd.data):
                        m.d.sync += bad_argument.eq(1)
                    m.d.comb += [pool_seen_wr.addr.eq(pool_rd.data), pool_seen_wr.data.eq(1),
                                 pool_seen_wr.en.eq(row_ok)]
                    m.d.sync += [b.eq(b + 1), i.eq(0)]

            with m.State("BEGIN_CLEAR"):
                m.d.comb += pool_rd.addr.eq(row(b, new=True))
                with m.If(i == 0):
                    m.d.sync += i.eq(1)
                with m.Else():
                    m.d.comb += [pool_seen_wr.addr.eq(pool_rd.data), pool_seen_wr.data.eq(0),
                                 pool_seen_wr.en.eq(pool_rd.data < p.max_pool_rows)]
                    m.d.sync += [b.eq(b + 1), i.eq(0)]
                with m.If(b == cmd.batch_size):
                    m.d.sync += [b.eq(0), i.eq(0)]
                    with m.If(bad_slot):
                        m.d.sync += status.eq(Status.BAD_SLOT)
                        m.next = "COMPLETE"
                    with m.Elif(bad_argument | (cmd.depths == 0) | (cmd.depths > p.max_depths)):
                        m.d.sync += status.eq(Status.BAD_ARGUMENT)
                        m.next = "COMPLETE"
                    with m.Else():
                        m.next = "BEGIN_INIT"

            with m.State("BEGIN_INIT"):
                # Per request: K2 node 0 and the sort/work rows, the frontier's root; element
                # i = 0: node 0; 1 .. MAXV: sort_scores; MAXV+1 .. 2*MAXV+K: work_scores.
                m.d.comb += [slot_rd.addr.eq(row(b, new=True)), root_rd.addr.eq(b)]
                host = k2.host_cmd.payload
                last = 2 * MAXV + K
                with m.If(b == cmd.batch_size):
                    m.d.sync += [b.eq(0), i.eq(0)]
                    m.next = "BEGIN_TABLE"
                with m.Elif(j == 0):  # memories read for request b
                    m.d.sync += j.eq(1)
                with m.Else():
                    m.d.comb += [k2.host_cmd.valid.eq(1), host.write.eq(1),
                                 host.slot.eq(slot_rd.data)]
                    with m.If(i == 0):
                        m.d.comb += [host.region.eq(Region.NODE), host.index.eq(0),
                                     host.tok.eq(root_rd.data), host.score.eq(ROOT_SCORE_BITS),
                                     host.delta.eq(0), host.prev.eq(-1), host.next.eq(-1),
                                     host.side.eq(-1)]
                    with m.Elif(i <= MAXV):
                        m.d.comb += [host.region.eq(Region.SORT), host.index.eq(i - 1),
                                     host.score.eq(Mux(i == 1, ROOT_SCORE_BITS, 0))]
                    with m.Else():
                        m.d.comb += [host.region.eq(Region.WORK), host.index.eq(i - 1 - MAXV),
                                     host.score.eq(Mux(i == MAXV + 1, ROOT_SCORE_BITS, 0))]
                    with m.If(k2.host_cmd.ready):
                        m.d.sync += i.eq(Mux(i == last, 0, i + 1))
                        with m.If(i == last):
                            m.d.sync += [b.eq(b + 1), j.eq(0)]
                            m.d.comb += [fscore_wr.addr.eq(b * WM), fscore_wr.data.eq(ONE_BITS),
                                         fscore_wr.en.eq(1), fnode_wr.addr.eq(b * WM),
                                         fnode_wr.data.eq(0), fnode_wr.en.eq(1),
                                         fmask_wr.addr.eq(b * WM), fmask_wr.data.eq(0),
                                         fmask_wr.en.eq(1)]
                m.d.comb += k2.host_rsp.ready.eq(1)

            with m.State("BEGIN_TABLE"):
                # req_to_token[pool, seq_len + x] = kv slot x, x = 0..MI, one run per request.
                m.d.comb += [pool_rd.addr.eq(row(b, new=True)), seq_rd.addr.eq(row(b, new=True))]
                with m.If(b == cmd.batch_size):
                    with m.If(~twriter.busy):
                        m.d.sync += [phase.eq(_Phase.DRAFTING), batch.eq(cmd.batch_size),
                                     bank.eq(~bank), depths_run.eq(0),
                                     verify_num.eq(cmd.verify_num), depths.eq(cmd.depths),
                                     depth.eq(1), width.eq(1), input_count.eq(1),
                                     cumu_count.eq(1), b.eq(0), i.eq(0), j.eq(0)]
                        m.next = "COMPLETE"
                with m.Elif(j == 0):
                    m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    with m.If(~twriter.busy):
                        row_word = pool_rd.data * cfg.context_len + seq_rd.data
                        m.d.comb += [twriter.start.eq(1), twriter.count.eq(p.kv_slots),
                                     twriter.address.eq(cfg.req_to_token + 4 * row_word)]
                        m.d.sync += [j.eq(2), i.eq(0)]
                with m.Else():
                    ahead = i + (twriter.words.ready & (j == 3))
                    m.d.comb += [kv_rd.addr.eq(kv_row(b, ahead, new=True)),
                                 twriter.words.valid.eq(j == 3),
                                 twriter.words.payload.eq(kv_rd.data)]
                    with m.If(j == 2):
                        m.d.comb += kv_rd.addr.eq(kv_row(b, 0, new=True))
                        m.d.sync += j.eq(3)
                    with m.Elif(twriter.words.ready):
                        m.d.sync += i.eq(i + 1)
                        with m.If(i == p.kv_slots - 1):
                            m.d.sync += [b.eq(b + 1), j.eq(0), i.eq(0)]

            # --- draft_depth -------------------------------------------------------------
            with m.State("DRAFT_CHECK"):
                m.d.sync += n.eq(width * K)
                with m.If((phase == _Phase.IDLE) | (phase == _Phase.BUILT)):
                    m.d.sync += status.eq(Status.BAD_PHASE)
                    m.next = "COMPLETE"
                with m.Elif(cmd.width_given & (cmd.width > WM)):
                    m.d.sync += status.eq(Status.BAD_WIDTH)
                    m.next = "COMPLETE"
                with m.Elif(phase == _Phase.DRAFTED):
                    m.d.sync += status.eq(Mux((stop_kind == StopReason.NODE_BUDGET)
                                              | (stop_kind == StopReason.INPUT_BUDGET),
                                              Status.NODE_BUDGET, Status.BAD_PHASE))
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [reader.start.eq(1), reader.address.eq(cmd.address1),
                                 reader.count.eq(batch * width * K)]
                    m.next = "DRAFT_TOKENS"

            with m.State("DRAFT_TOKENS"):
                # Every token of the depth is in (and checked) before anything is written.
                m.d.comb += [words.ready.eq(1), token_wr.addr.eq(b * NM + i),
                             token_wr.data.eq(words.payload), token_wr.en.eq(words_taken)]
                with m.If(words_taken):
                    with m.If(words.payload >= cfg.vocab_size):  # unsigned: negatives too
                        m.d.sync += bad_argument.eq(1)
                    m.d.sync += i.eq(Mux(i == n - 1, 0, i + 1))
                    with m.If(i == n - 1):
                        m.d.sync += b.eq(b + 1)
                with m.If(~reader.busy & ~words.valid & (b == batch)):
                    m.d.sync += [b.eq(0), i.eq(0)]
                    with m.If(bad_argument):
                        m.d.sync += status.eq(Status.BAD_ARGUMENT)
                        m.next = "COMPLETE"
                    with m.Elif(batch == 0):
                        m.d.sync += depths_run.eq(depths_run + 1)
                        m.next = "COMPLETE"
                    with m.Else():
                        m.next = "DRAFT_PROBAS"

            with m.State("DRAFT_PROBAS"):
                # Request b: its probabilities and the frontier's scores.
                with m.If(b == batch):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "K3_COMMAND"
                with m.Elif(j == 0):
                    m.d.comb += [reader.start.eq(1), reader.count.eq(n),
                                 reader.address.eq(cmd.address0 + 4 * (b * n))]
                    m.d.sync += [j.eq(1), i.eq(0)]
                with m.Else():
                    m.d.comb += words.ready.eq(1)
                    with m.If(words_taken):
                        m.d.sync += [probas[i].eq(words.payload), i.eq(i + 1)]
                    # the frontier scores, one per clock (a clock behind their read)
                    m.d.comb += fscore_rd.addr.eq(b * WM + j - 1)
                    with m.If(j <= WM + 1):
                        m.d.sync += j.eq(j + 1)
                    with m.If((j >= 2) & (j <= WM + 1)):
                        m.d.sync += parent_scores[j - 2].eq(fscore_rd.data)
                    with m.If(~reader.busy & ~words.valid & (j == WM + 2)):
                        m.d.sync += [j.eq(0), i.eq(0)]
                        m.next = "K1"

            with m.State("K1"):
                req = k1.i.payload
                m.d.comb += [k1.i.valid.eq(1), req.tree_width.eq(width),
                             req.cumu_count.eq(cumu_count), req.first.eq(b == 0),
                             req.last.eq(b == batch - 1)]
                m.d.comb += [req.probas[t].eq(probas[t]) for t in range(NM)]
                m.d.comb += [req.parent_scores[w].eq(parent_scores[w]) for w in range(WM)]
                with m.If(k1.i.ready):
                    m.next = "K1_RESULT"

            with m.State("K1_RESULT"):
                m.d.comb += k1.o.ready.eq(1)
                with m.If(k1.o.valid):
                    m.d.sync += result.eq(k1.o.payload)
                    m.d.comb += [cache_wr.addr.eq(b), cache_wr.data.eq(k1.o.payload.cache),
                                 cache_wr.en.eq(1), parent_wr.addr.eq(b),
                                 parent_wr.data.eq(k1.o.payload.parents), parent_wr.en.eq(1)]
                    m.d.sync += i.eq(0)
                    m.next = "K2_PREFETCH"

            with m.State("K2_PREFETCH"):
                m.d.comb += [token_rd.addr.eq(b * NM), fnode_rd.addr.eq(b * WM),
                             fmask_rd.addr.eq(b * WM), slot_rd.addr.eq(row(b))]
                m.next = "K2_SEND"

            with m.State("K2_SEND"):
                # Beat i of request b; the memories are read one beat ahead.
                beat = k2.req.payload
                taken = k2.req.ready
                ahead = i + taken
                m.d.comb += [token_rd.addr.eq(b * NM + ahead), fnode_rd.addr.eq(b * WM + ahead),
                             fmask_rd.addr.eq(b * WM + ahead), slot_rd.addr.eq(row(b))]
                m.d.comb += [
                    k2.req.valid.eq(1), beat.first.eq(i == 0), beat.last.eq(i == n - 1),
                    beat.proba.eq(result.curr[i]), beat.token.eq(token_rd.data),
                    beat.sorted_score.eq(result.scores[i]),
                    beat.sorted_index.eq(result.indices[i]),
                    beat.parent_index.eq(result.parents[i]),
                    beat.topk_index.eq(fnode_rd.data), beat.mask.eq(fmask_rd.data),
                ]
                with m.If(taken):
                    m.d.sync += i.eq(i + 1)
                    with m.If(i == n - 1):
                        m.d.sync += i.eq(0)
                        m.next = "K2_DONE"

            with m.State("K2_DONE"):
                m.d.comb += k2.done.ready.eq(1)
                with m.If(k2.done.valid):
                    m.d.sync += [i.eq(0), j.eq(0)]
                    with m.If(depth == 1):
                        m.next = "RAW_SCORES"
                    with m.Else():
                        m.d.sync += b.eq(b + 1)
                        m.next = "DRAFT_PROBAS"

            with m.State("RAW_SCORES"):
                # Depth 1 keeps the raw probabilities as the new nodes' cumu_scores
                # (golden.draft_round): read node cumu_count + i, write it back re-scored.
                host = k2.host_cmd.payload
                m.d.comb += [slot_rd.addr.eq(row(b)), host.slot.eq(slot_rd.data),
                             host.region.eq(Region.NODE), host.index.eq(cumu_count + i),
                             k2.host_rsp.ready.eq(1)]
                with m.If(j == 0):  # read
                    m.d.comb += k2.host_cmd.valid.eq(1)
                    with m.If(k2.host_cmd.ready):
                        m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    with m.If(k2.host_rsp.valid):
                        m.d.sync += [out_node.eq(k2.host_rsp.payload), j.eq(2)]
                with m.Elif(j == 2):  # write back
                    m.d.comb += [k2.host_cmd.valid.eq(1), host.write.eq(1),
                                 host.tok.eq(out_node.tok), host.score.eq(probas[i]),
                                 host.delta.eq(out_node.delta), host.prev.eq(out_node.prev),
                                 host.next.eq(out_node.next), host.side.eq(out_node.side)]
                    with m.If(k2.host_cmd.ready):
                        m.d.sync += j.eq(3)
                with m.Else():
                    with m.If(k2.host_rsp.valid):
                        m.d.sync += [j.eq(0), i.eq(i + 1)]
                        with m.If(i == n - 1):
                            m.d.sync += [i.eq(0), b.eq(b + 1)]
                            m.next = "DRAFT_PROBAS"

            with m.State("K3_COMMAND"):
                c = k3.cmd.payload
                m.d.comb += [k3.cmd.valid.eq(1), c.batch_size.eq(batch),
                             c.cumu_count.eq(cumu_count), c.verify_num.eq(verify_num),
                             c.cost_per_node.eq(cfg.cost_per_node)]
                clamped = clamp_verify(verify_num)
                m.d.sync += ws_len.eq(Mux(cumu_count < clamped, cumu_count, clamped) + K)
                m.d.comb += slot_rd.addr.eq(row(0))
                with m.If(k3.cmd.ready):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "K3_ROWS"

            with m.State("K3_ROWS"):
                # work_scores[slot, 0 .. ws0+K-1] of every request from K2's memory into K3:
                # reads issued by (b, i), answers forwarded by their count j.
                host = k2.host_cmd.payload
                m.d.comb += [slot_rd.addr.eq(row(b + (k2.host_cmd.ready & (i == ws_len - 1)))),
                             host.slot.eq(slot_rd.data), host.region.eq(Region.WORK),
                             host.index.eq(i), k2.host_cmd.valid.eq(b < batch)]
                with m.If(k2.host_cmd.valid & k2.host_cmd.ready):
                    m.d.sync += i.eq(Mux(i == ws_len - 1, 0, i + 1))
                    with m.If(i == ws_len - 1):
                        m.d.sync += b.eq(b + 1)
                beat = k3.scores.payload
                m.d.comb += [k3.scores.valid.eq(k2.host_rsp.valid),
                             k2.host_rsp.ready.eq(k3.scores.ready),
                             beat.scores[0].eq(k2.host_rsp.payload.score)]
                # j counts answers within the current row
                m.d.comb += [beat.first.eq(j == 0), beat.last.eq(j == ws_len - 1)]
                with m.If(k3.scores.valid & k3.scores.ready):
                    m.d.sync += j.eq(Mux(j == ws_len - 1, 0, j + 1))
                with m.If((b == batch) & ~k2.host_rsp.valid & (j == 0)
                          & ~(k2.host_cmd.valid)):
                    m.d.sync += [i.eq(0), j.eq(0)]
                    m.next = "K3_RESULT"

            with m.State("K3_RESULT"):
                m.d.comb += k3.deltas.ready.eq(1)
                with m.If(k3.deltas.valid & k3.deltas.payload.last):
                    policy = k3.deltas.payload.next_width
                    chosen = Mux(cmd.width_given, cmd.width,
                                 Mux(policy > WM, WM, policy))
                    m.d.sync += next_width.eq(chosen)
                    m.next = "DECIDE"

            with m.State("DECIDE"):
                new_count = cumu_count + n
                m.d.sync += [cumu_count.eq(new_count), depths_run.eq(depths_run + 1), b.eq(0),
                             i.eq(0), j.eq(0)]
                with m.If(next_width == 0):
                    m.d.sync += stop_reason.eq(StopReason.WIDTH_ZERO)
                with m.Elif(depth >= depths):
                    m.d.sync += stop_reason.eq(StopReason.DEPTHS)
                with m.Elif(new_count + next_width * K > MAXN):
                    m.d.sync += stop_reason.eq(StopReason.NODE_BUDGET)
                with m.Elif(input_count + next_width > MI + 1):
                    m.d.sync += stop_reason.eq(StopReason.INPUT_BUDGET)
                m.next = "STOP_OR_FRONTIER"

            with m.State("STOP_OR_FRONTIER"):
                with m.If(stop_reason != StopReason.NONE):
                    m.d.sync += [phase.eq(_Phase.DRAFTED), stop_kind.eq(stop_reason)]
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [rwriter.start.eq(1), rwriter.address.eq(cmd.address2),
                                 rwriter.count.eq(batch * next_width * F)]
                    m.next = "FRONTIER_READ"

            with m.State("FRONTIER_READ"):
                # Output j of request b: K2's output row, then the record's words.
                host = k2.host_cmd.payload
                m.d.comb += [slot_rd.addr.eq(row(b)), host.slot.eq(slot_rd.data),
                             host.region.eq(Region.OUTPUT), host.index.eq(j),
                             cache_rd.addr.eq(b), parent_rd.addr.eq(b), seq_rd.addr.eq(row(b)),
                             kv_rd.addr.eq(kv_row(b, input_count + j)),
                             k2.host_rsp.ready.eq(1)]
                with m.If(b == batch):
                    with m.If(~rwriter.busy):
                        m.d.sync += [width.eq(next_width), depth.eq(depth + 1),
                                     input_count.eq(input_count + next_width)]
                        m.next = "COMPLETE"
                with m.Elif(i == 0):  # the memories are read for (b, j)
                    m.d.sync += i.eq(1)
                with m.Elif(i == 1):
                    m.d.comb += k2.host_cmd.valid.eq(1)
                    with m.If(k2.host_cmd.ready):
                        m.d.sync += i.eq(2)
                with m.Elif(i == 2):
                    with m.If(k2.host_rsp.valid):
                        m.d.sync += [out_node.eq(k2.host_rsp.payload), i.eq(3)]
                with m.Else():
                    # word i - 3 of the record
                    old = Signal(range(MI + 1))  # mask columns before this depth
                    mask_row = Signal(max(1, MI))
                    m.d.comb += [old.eq(input_count - 1),
                                 mask_row.eq((out_node.mask & ((Const(1, MI + 1) << old) - 1))
                                             | (Const(1, MI + 1) << (old + j)))]
                    cache = Array(cache_rd.data[k] for k in range(K))
                    parents = Array(parent_rd.data[k] for k in range(K))
                    record_words = Array([out_node.tok, parents[j], cache[j],
                                          seq_rd.data + depth, kv_rd.data]
                                         + [mask_row.word_select(x, 32)
                                            if MI > 32 * x else Const(0, 32)
                                            for x in range(p.mask_words)])
                    m.d.comb += [rwriter.words.valid.eq(1),
                                 rwriter.words.payload.eq(record_words[i - 3])]
                    with m.If(rwriter.words.ready):
                        m.d.sync += i.eq(i + 1)
                        with m.If(i == F + 2):
                            m.d.sync += i.eq(0)
                            # the next frontier, in place of the one just used
                            m.d.comb += [
                                fscore_wr.addr.eq(b * WM + j), fscore_wr.data.eq(out_node.score),
                                fscore_wr.en.eq(1),
                                fnode_wr.addr.eq(b * WM + j), fnode_wr.data.eq(cache[j]),
                                fnode_wr.en.eq(1),
                                fmask_wr.addr.eq(b * WM + j), fmask_wr.data.eq(mask_row),
                                fmask_wr.en.eq(1)]
                            m.d.sync += j.eq(Mux(j == next_width - 1, 0, j + 1))
                            with m.If(j == next_width - 1):
                                m.d.sync += b.eq(b + 1)

            # --- build_verify ------------------------------------------------------------
            with m.State("VERIFY_CHECK"):
                clamped = clamp_verify(verify_num)
                size = Mux(cumu_count < clamped, cumu_count, clamped)
                m.d.sync += [vn.eq(Mux(batch == 0, 0, size)), mode.eq(cmd.tree_mask_mode),
                             invalid.eq(0), mask_total.eq(0), kv_total.eq(0), running.eq(0)]
                with m.If(((phase != _Phase.DRAFTING) & (phase != _Phase.DRAFTED))
                          | (depths_run == 0)):
                    m.d.sync += status.eq(Status.BAD_PHASE)
                    m.next = "COMPLETE"
                with m.Elif(cmd.tree_mask_mode == 3):
                    m.d.sync += status.eq(Status.BAD_ARGUMENT)
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [reader.start.eq(1), reader.address.eq(cmd.address0),
                                 reader.count.eq(Mux(batch == 0, 0, batch * size))]
                    m.next = "VERIFY_LOCS"

            with m.State("VERIFY_LOCS"):
                # The verify forward's KV slots, kept for kv_indices and req_to_token.
                m.d.comb += [words.ready.eq(1), locs_wr.addr.eq(i), locs_wr.data.eq(words.payload),
                             locs_wr.en.eq(words_taken), locs2_wr.addr.eq(i),
                             locs2_wr.data.eq(words.payload), locs2_wr.en.eq(words_taken)]
                with m.If(words_taken):
                    m.d.sync += i.eq(i + 1)
                with m.If(~reader.busy & ~words.valid):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "VERIFY_SIZES"

            with m.State("VERIFY_SIZES"):
                # mask bytes and kv_indices words of the batch (seq_len read a clock ahead)
                m.d.comb += seq_rd.addr.eq(row(b))
                with m.If(b == batch):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0), trees.eq(0), tree_word.eq(0),
                                 k4_cmd_sent.eq(0), seq_b.eq(0), mask_b.eq(0),
                                 mask_rows.eq(0), flushed.eq(0), rsp_x.eq(0)]
                    m.d.comb += [rwriter.start.eq(1), rwriter.address.eq(cmd.address1),
                                 rwriter.count.eq(batch * vn * p.tree_words),
                                 mwriter.start.eq(1), mwriter.address.eq(cmd.address2),
                                 mwriter.count.eq((mask_total + 3) >> 2)]
                    m.next = "VERIFY_K4"
                with m.Elif(j == 0):
                    m.d.sync += j.eq(1)
                with m.Else():
                    row_bytes = Mux(mode == TreeMaskMode.FULL_MASK, seq_rd.data + vn,
                                    Mux(mode == TreeMaskMode.QLEN_ONLY, vn, (vn + 7) >> 3))
                    m.d.sync += [mask_total.eq(mask_total + vn * row_bytes),
                                 kv_total.eq(kv_total + seq_rd.data + vn), b.eq(b + 1), j.eq(0)]

            with m.State("VERIFY_K4"):
                # (a) the command, then every request's nodes read out of K2 and its seq_len
                kc = k4.cmd.payload
                m.d.comb += [k4.cmd.valid.eq(~k4_cmd_sent), kc.batch_size.eq(batch),
                             kc.cumu_count.eq(cumu_count), kc.verify_num.eq(verify_num),
                             kc.tree_mask_mode.eq(mode)]
                with m.If(k4.cmd.valid & k4.cmd.ready):
                    m.d.sync += k4_cmd_sent.eq(1)
                host = k2.host_cmd.payload
                advance = k2.host_cmd.ready & (i == cumu_count - 1)
                m.d.comb += [slot_rd.addr.eq(row(b + advance)), host.slot.eq(slot_rd.data),
                             host.region.eq(Region.NODE), host.index.eq(i),
                             k2.host_cmd.valid.eq(k4_cmd_sent & (b < batch))]
                with m.If(k2.host_cmd.valid & k2.host_cmd.ready):
                    m.d.sync += i.eq(Mux(i == cumu_count - 1, 0, i + 1))
                    with m.If(i == cumu_count - 1):
                        m.d.sync += b.eq(b + 1)
                node = k4.nodes.payload
                answer = k2.host_rsp.payload
                m.d.comb += [k4.nodes.valid.eq(k2.host_rsp.valid),
                             k2.host_rsp.ready.eq(k4.nodes.ready),
                             node.token.eq(answer.tok), node.score.eq(answer.score),
                             node.prev.eq(answer.prev), node.first.eq(rsp_x == 0),
                             node.last.eq(rsp_x == cumu_count - 1)]
                with m.If(k4.nodes.valid & k4.nodes.ready):
                    m.d.sync += rsp_x.eq(Mux(rsp_x == cumu_count - 1, 0, rsp_x + 1))
                m.d.comb += [seq_k4_rd.addr.eq(row(seq_b + (k4.seq_lens.valid
                                                            & k4.seq_lens.ready))),
                             k4.seq_lens.valid.eq(k4_cmd_sent & (seq_b < batch)),
                             k4.seq_lens.payload.seq_len.eq(seq_k4_rd.data)]
                with m.If(k4.seq_lens.valid & k4.seq_lens.ready):
                    m.d.sync += seq_b.eq(seq_b + 1)
                # (b) tree records, five words each
                record = k4.tree.payload
                tree_fields = Array([record.retrive_index, record.next_token,
                                     record.next_sibling, record.position, record.draft_token])
                m.d.comb += [rwriter.words.valid.eq(k4.tree.valid),
                             rwriter.words.payload.eq(tree_fields[tree_word]),
                             k4.tree.ready.eq(rwriter.words.ready
                                              & (tree_word == p.tree_words - 1))]
                with m.If(rwriter.words.valid & rwriter.words.ready):
                    m.d.sync += tree_word.eq(Mux(tree_word == p.tree_words - 1, 0,
                                                 tree_word + 1))
                m.d.comb += [vtree_wr.addr.eq(trees), vtree_wr.data.token.eq(record.draft_token),
                             vtree_wr.data.index.eq(record.retrive_index),
                             vtree_wr.data.next.eq(record.next_token),
                             vtree_wr.data.sibling.eq(record.next_sibling),
                             vtree_wr.en.eq(k4.tree.valid & k4.tree.ready)]
                with m.If(k4.tree.valid & k4.tree.ready):
                    m.d.sync += trees.eq(trees + 1)
                    with m.If(record.invalid):
                        m.d.sync += invalid.eq(1)
                # (c) mask rows into bytes; the row width of the request they belong to
                m.d.comb += [mask_bytes.mask.valid.eq(k4.mask.valid),
                             mask_bytes.mask.payload.eq(k4.mask.payload),
                             k4.mask.ready.eq(mask_bytes.mask.ready),
                             seq_mask_rd.addr.eq(row(mask_b)),
                             mask_bytes.packed.eq(mode == TreeMaskMode.QLEN_ONLY_BITPACKING),
                             mask_bytes.columns.eq(Mux(mode == TreeMaskMode.FULL_MASK,
                                                       seq_mask_rd.data + vn, vn))]
                with m.If(k4.mask.valid & k4.mask.ready & k4.mask.payload.row_last):
                    m.d.sync += mask_rows.eq(Mux(mask_rows == vn - 1, 0, mask_rows + 1))
                    with m.If(mask_rows == vn - 1):
                        m.d.sync += mask_b.eq(mask_b + 1)
                with m.If((mask_b == batch) & ~flushed):
                    m.d.comb += mask_bytes.flush.eq(1)
                    m.d.sync += flushed.eq(1)
                with m.If(flushed & (trees == batch * vn) & ~rwriter.busy & ~mwriter.busy
                          & (b == batch) & (seq_b == batch)):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0), running.eq(0)]
                    m.next = "VERIFY_INDPTR"

            with m.State("VERIFY_INDPTR"):
                # qo_indptr, kv_indptr, mask_indptr (B + 1 words each; j is the array)
                m.d.comb += seq_rd.addr.eq(row(b))
                with m.If(i == 0):
                    m.d.comb += [rwriter.start.eq(1), rwriter.address.eq(cmd.address3),
                                 rwriter.count.eq(3 * (batch + 1))]
                    m.d.sync += i.eq(1)
                with m.Elif(i == 1):  # seq_len of row b is being read
                    m.d.sync += i.eq(2)
                with m.Else():
                    row_bytes = Mux(mode == TreeMaskMode.FULL_MASK, seq_rd.data + vn,
                                    Mux(mode == TreeMaskMode.QLEN_ONLY, vn, (vn + 7) >> 3))
                    step = Array([vn, seq_rd.data + vn, vn * row_bytes])[j]
                    m.d.comb += [rwriter.words.valid.eq(1), rwriter.words.payload.eq(running)]
                    with m.If(rwriter.words.ready):
                        m.d.sync += [running.eq(running + step), b.eq(b + 1), i.eq(1)]
                        with m.If(b == batch):
                            m.d.sync += [running.eq(0), b.eq(0), j.eq(j + 1)]
                            with m.If(j == 2):
                                m.d.sync += [j.eq(0), i.eq(0)]
                                m.next = "VERIFY_KV"

            with m.State("VERIFY_KV"):
                # kv_indices: per request the table row's first seq_len slots, then its
                # verify KV slots (which VERIFY_TABLE writes to the row after them)
                m.d.comb += [pool_rd.addr.eq(row(b)), seq_rd.addr.eq(row(b))]
                with m.If(j == 0):
                    with m.If(~rwriter.busy):
                        m.d.comb += [rwriter.start.eq(1), rwriter.address.eq(cmd.address4),
                                     rwriter.count.eq(kv_total)]
                        m.d.sync += j.eq(1)
                with m.Elif(b == batch):
                    with m.If(~rwriter.busy):
                        m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                        m.next = "VERIFY_TABLE"
                with m.Elif(j == 1):  # pool and seq_len of row b are being read
                    m.d.sync += j.eq(2)
                with m.Elif(j == 2):
                    m.d.comb += [reader.start.eq(1), reader.count.eq(seq_rd.data),
                                 reader.address.eq(cfg.req_to_token
                                                   + 4 * (pool_rd.data * cfg.context_len))]
                    m.d.sync += j.eq(3)
                with m.Elif(j == 3):  # the row's prefix, word for word
                    m.d.comb += [rwriter.words.valid.eq(words.valid),
                                 rwriter.words.payload.eq(words.payload),
                                 words.ready.eq(rwriter.words.ready)]
                    with m.If(~reader.busy & ~words.valid):
                        m.d.sync += [j.eq(4), i.eq(0)]
                with m.Else():  # then the request's verify slots (locs read a clock ahead)
                    taken = rwriter.words.ready & (j == 5)
                    m.d.comb += locs_rd.addr.eq(b * vn + i + taken)
                    with m.If(j == 4):
                        m.d.sync += j.eq(5)
                    with m.Elif(i == vn):
                        m.d.sync += [b.eq(b + 1), j.eq(1), i.eq(0)]
                    with m.Else():
                        m.d.comb += [rwriter.words.valid.eq(1),
                                     rwriter.words.payload.eq(locs_rd.data)]
                        with m.If(rwriter.words.ready):
                            m.d.sync += i.eq(i + 1)

            with m.State("VERIFY_TABLE"):
                # req_to_token[pool, seq_len + x] = verify slot x (only for a valid tree)
                m.d.comb += [pool_rd.addr.eq(row(b)), seq_rd.addr.eq(row(b))]
                with m.If(invalid):
                    m.d.sync += status.eq(Status.BAD_ARGUMENT)
                    m.next = "COMPLETE"
                with m.Elif(b == batch):
                    with m.If(~twriter.busy):
                        m.d.sync += [phase.eq(_Phase.BUILT), b.eq(0), i.eq(0), j.eq(0)]
                        m.next = "COMPLETE"
                with m.Elif(j == 0):
                    m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    with m.If(~twriter.busy):
                        row_word = pool_rd.data * cfg.context_len + seq_rd.data
                        m.d.comb += [twriter.start.eq(1), twriter.count.eq(vn),
                                     twriter.address.eq(cfg.req_to_token + 4 * row_word)]
                        m.d.sync += [j.eq(2), i.eq(0)]
                with m.Else():
                    taken = twriter.words.ready & (j == 3)
                    m.d.comb += locs_rd.addr.eq(b * vn + i + taken)
                    with m.If(j == 2):
                        m.d.sync += j.eq(3)
                    with m.Elif(i == vn):
                        m.d.sync += [b.eq(b + 1), j.eq(0), i.eq(0)]
                    with m.Else():
                        m.d.comb += [twriter.words.valid.eq(1),
                                     twriter.words.payload.eq(locs_rd.data)]
                        with m.If(twriter.words.ready):
                            m.d.sync += i.eq(i + 1)

            # --- verify ------------------------------------------------------------------
            with m.State("RUN_CHECK"):
                m.d.sync += [steps.eq(depths_run + 1), verified_total.eq(0), rows_read.eq(0),
                             active_count.eq(0), bad_argument.eq(0), b.eq(0), i.eq(0), j.eq(0)]
                with m.If(phase != _Phase.BUILT):
                    m.d.sync += status.eq(Status.BAD_PHASE)
                    m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [reader.start.eq(1), reader.address.eq(cmd.address0),
                                 reader.count.eq(batch * (p.verify_request_words + vn))]
                    m.next = "RUN_RECORDS"

            with m.State("RUN_RECORDS"):
                # request records (kept for the run) with golden.tree_verify's checks:
                # temperature finite and >= 0, top_p and the thresholds in [0, 1]
                m.d.comb += [words.ready.eq(1), vreq_wr.addr.eq(b * VQ + i),
                             vreq_wr.data.eq(words.payload), vreq_wr.en.eq(words_taken)]
                value = words.payload
                not_finite = value[23:31] == 0xFF
                negative = value[31] & (value[:31] != 0)  # -0.0 is >= 0
                with m.If(words_taken):
                    m.d.sync += i.eq(Mux(i == p.verify_request_words + vn - 1, 0, i + 1))
                    with m.If(i == p.verify_request_words + vn - 1):
                        m.d.sync += b.eq(b + 1)
                    with m.If((i == 0) & (not_finite | negative)):
                        m.d.sync += bad_argument.eq(1)
                    with m.If((i == 2) & ~unit_interval(value)):
                        m.d.sync += bad_argument.eq(1)
                with m.If(~reader.busy & ~words.valid):
                    threshold_bad = Signal()
                    for threshold in (cmd.threshold_single, cmd.threshold_acc):
                        with m.If(~unit_interval(threshold)):
                            m.d.comb += threshold_bad.eq(1)
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    with m.If(bad_argument | threshold_bad):
                        m.d.sync += status.eq(Status.BAD_ARGUMENT)
                        m.next = "COMPLETE"
                    with m.Else():
                        m.next = "RUN_K7_CMD"

            with m.State("RUN_K7_CMD"):
                c7 = k7.cmd.payload
                m.d.comb += [k7.cmd.valid.eq(1), c7.batch_size.eq(batch),
                             c7.num_draft_tokens.eq(vn), c7.num_speculative_tokens.eq(steps),
                             c7.eos_token_id.eq(cmd.eos_token_id)]
                with m.If(k7.cmd.ready):
                    m.next = "RUN_REQUEST"

            with m.State("RUN_REQUEST"):
                # request b: clear its predicts row (the verify writes the accepted entries)
                with m.If(b == batch):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "RUN_ACTIVE"
                with m.Elif(i == vn):
                    m.d.sync += [i.eq(0), j.eq(0)]
                    m.next = "RUN_HEADER"
                with m.Else():
                    m.d.comb += [predicts_wr.addr.eq(b * vn + i), predicts_wr.data.eq(0),
                                 predicts_wr.en.eq(1)]
                    m.d.sync += i.eq(i + 1)

            with m.State("RUN_HEADER"):
                # the request's five header words, one a clock, into `header`
                m.d.comb += vreq_rd.addr.eq(b * VQ + j)
                with m.If(j <= p.verify_request_words):
                    m.d.sync += j.eq(j + 1)
                with m.If(j >= 1):
                    m.d.sync += header[j - 1].eq(vreq_rd.data)
                with m.If(j == p.verify_request_words + 1):
                    m.d.sync += [j.eq(0), i.eq(0), accepted.eq(0), accept_row.eq(0)]
                    m.next = "RUN_TV_CMD"

            with m.State("RUN_TV_CMD"):
                tc = tv.cmd.payload
                m.d.comb += [tv_busy.eq(1), tv.cmd.valid.eq(1), tc.lfsr.eq(cmd.lfsr),
                             tc.nodes.eq(vn), tc.steps.eq(steps),
                             tc.vocab_size.eq(cfg.vocab_size),
                             tc.row_address.eq(cmd.address1 + b * vn * cmd.row_pitch),
                             tc.row_pitch.eq(cmd.row_pitch), tc.temperature.eq(header[0]),
                             tc.top_k.eq(header[1]), tc.top_p.eq(header[2]),
                             tc.seed.eq(header[3]), tc.final_coin.eq(header[3]),
                             tc.threshold_single.eq(cmd.threshold_single),
                             tc.threshold_acc.eq(cmd.threshold_acc),
                             vtree_rd.addr.eq(b * vn), coin_rd.addr.eq(b * VQ + VQH)]
                with m.If(tv.cmd.ready):
                    m.next = "RUN_TV_TREE"

            with m.State("RUN_TV_TREE"):
                beat = tv.tree.payload
                taken = tv.tree.ready
                m.d.comb += [tv_busy.eq(1), vtree_rd.addr.eq(b * vn + i + taken),
                             coin_rd.addr.eq(b * VQ + VQH + i + taken),
                             tv.tree.valid.eq(1), beat.candidate.eq(vtree_rd.data.token),
                             beat.index.eq(vtree_rd.data.index),
                             beat.next_token.eq(vtree_rd.data.next),
                             beat.next_sibling.eq(vtree_rd.data.sibling),
                             beat.coin.eq(coin_rd.data), beat.first.eq(i == 0),
                             beat.last.eq(i == vn - 1)]
                with m.If(taken):
                    m.d.sync += i.eq(i + 1)
                    with m.If(i == vn - 1):
                        m.d.sync += i.eq(0)
                        m.next = "RUN_TV_RESULT"

            with m.State("RUN_TV_RESULT"):
                out = tv.result.payload
                m.d.comb += [tv_busy.eq(1), tv.result.ready.eq(1),
                             predicts_wr.addr.eq(out.index), predicts_wr.data.eq(out.token),
                             predicts_wr.en.eq(tv.result.valid)]
                with m.If(tv.result.valid):
                    m.d.sync += [accept_row[accepted[:max(1, (p.max_steps - 1).bit_length())]]
                                 .eq(out.index), accepted.eq(accepted + 1)]
                    with m.If(out.last):
                        m.d.sync += [res.nan.eq(out.nan), i.eq(0), j.eq(0)]
                        m.next = "RUN_TV_ROWS"

            with m.State("RUN_TV_ROWS"):
                m.d.sync += [res.rows.eq(tv.status.rows), rows_read.eq(rows_read + tv.status.rows)]
                m.next = "RUN_K7_NODES"

            with m.State("RUN_K7_NODES"):
                # predicts and KV slots of the request's n positions (read a clock ahead)
                node7 = k7.nodes.payload
                taken = k7.nodes.valid & k7.nodes.ready
                m.d.comb += [predicts_rd.addr.eq(b * vn + i + taken),
                             locs2_rd.addr.eq(b * vn + i + taken),
                             node7.predict.eq(predicts_rd.data),
                             node7.cache_loc.eq(locs2_rd.data),
                             node7.first.eq(i == 0), node7.last.eq(i == vn - 1),
                             k7.nodes.valid.eq(j == 1)]
                with m.If(j == 0):
                    m.d.comb += [predicts_rd.addr.eq(b * vn), locs2_rd.addr.eq(b * vn)]
                    m.d.sync += j.eq(1)
                with m.Elif(taken):
                    m.d.sync += i.eq(i + 1)
                    with m.If(i == vn - 1):
                        m.d.sync += [i.eq(0), j.eq(0)]
                        m.next = "RUN_K7_REQUEST"

            with m.State("RUN_K7_REQUEST"):
                rq = k7.request.payload
                m.d.comb += [pool_rd.addr.eq(row(b)), seq_rd.addr.eq(row(b))]
                with m.If(j == 0):  # pool and seq_len are being read
                    m.d.sync += j.eq(1)
                with m.Else():
                    m.d.comb += [k7.request.valid.eq(1), rq.accept_token_num.eq(accepted - 1),
                                 rq.req_pool_index.eq(pool_rd.data), rq.seq_len.eq(seq_rd.data),
                                 rq.max_seq_len.eq(header[4])]
                    m.d.comb += [rq.accept_index[x].eq(accept_row[x])
                                 for x in range(p.max_steps)]
                    with m.If(k7.request.ready):
                        m.d.sync += [j.eq(0), i.eq(0), res.accept_token_num.eq(accepted - 1)]
                        m.d.comb += [accidx_wr.addr.eq(b), accidx_wr.data.eq(accept_row),
                                     accidx_wr.en.eq(1)]
                        m.next = "RUN_K7_OUT"

            with m.State("RUN_K7_OUT"):
                # the commits (verified ids and the KV slots of the accepted tokens), then the
                # request's result
                commit = k7.commit.payload
                m.d.comb += [k7.commit.ready.eq(1), k7.result.ready.eq(1),
                             vids_wr.addr.eq(commit.verified_index),
                             vids_wr.data.eq(commit.verified_id),
                             vids_wr.en.eq(k7.commit.valid), commit_wr.addr.eq(i),
                             commit_wr.data.eq(commit.kv_loc), commit_wr.en.eq(k7.commit.valid)]
                with m.If(k7.commit.valid):
                    m.d.sync += i.eq(i + 1)
                with m.If(k7.result.valid):
                    r7 = k7.result.payload
                    m.d.comb += [vres_wr.addr.eq(b), vres_wr.en.eq(1),
                                 vres_wr.data.eq(res),
                                 vres_wr.data.accept_length.eq(r7.accept_length),
                                 vres_wr.data.next_root.eq(r7.next_root),
                                 vres_wr.data.finished.eq(r7.finished),
                                 vres_wr.data.seq_len.eq(r7.seq_len),
                                 vres_wr.data.offset.eq(r7.verified_offset),
                                 vres_wr.data.evict.eq(r7.evict),
                                 seq_wr.addr.eq(row(b)), seq_wr.data.eq(r7.seq_len),
                                 seq_wr.en.eq(1)]
                    m.d.sync += [verified_total.eq(r7.verified_offset + r7.accept_length),
                                 res.accept_length.eq(r7.accept_length), j.eq(0)]
                    m.next = "RUN_TABLE"

            with m.State("RUN_TABLE"):
                # req_to_token[pool, old seq_len + x] = the accepted tokens' KV slots
                m.d.comb += [pool_rd.addr.eq(row(b)), seq_rd.addr.eq(row(b))]
                with m.If(j == 0):
                    m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    with m.If(~twriter.busy):
                        old_len = seq_rd.data - res.accept_length
                        row_word = pool_rd.data * cfg.context_len + old_len
                        m.d.comb += [twriter.start.eq(1), twriter.count.eq(res.accept_length),
                                     twriter.address.eq(cfg.req_to_token + 4 * row_word)]
                        m.d.sync += [j.eq(2), i.eq(0)]
                with m.Else():
                    taken = twriter.words.ready & (j == 3)
                    m.d.comb += commit_rd.addr.eq(i + taken)
                    with m.If(j == 2):
                        m.d.sync += j.eq(3)
                    with m.Elif(i == res.accept_length):
                        m.d.sync += [b.eq(b + 1), j.eq(0), i.eq(0)]
                        m.next = "RUN_REQUEST"
                    with m.Else():
                        m.d.comb += [twriter.words.valid.eq(1),
                                     twriter.words.payload.eq(commit_rd.data)]
                        with m.If(twriter.words.ready):
                            m.d.sync += i.eq(i + 1)

            with m.State("RUN_ACTIVE"):
                # the compaction of the unfinished rows
                m.d.comb += [active.cmd.valid.eq(j == 0), active.cmd.payload.batch_size.eq(batch),
                             vres_rd.addr.eq(i + (active.finished.valid & active.finished.ready)),
                             active.finished.valid.eq((j == 2) & (i < batch)),
                             active.finished.payload.finished.eq(vres_rd.data.finished),
                             active.inverse.ready.eq(1), active.slots.ready.eq(1),
                             active.count.ready.eq(1)]
                with m.If(j == 0):
                    with m.If(active.cmd.ready):
                        m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    m.d.comb += vres_rd.addr.eq(0)
                    m.d.sync += j.eq(2)
                with m.If(active.finished.valid & active.finished.ready):
                    m.d.sync += i.eq(i + 1)
                with m.If(active.inverse.valid):
                    m.d.comb += [inverse_wr.addr.eq(b), inverse_wr.data.eq(
                        active.inverse.payload.active_inverse), inverse_wr.en.eq(1)]
                    m.d.sync += b.eq(b + 1)
                with m.If(active.slots.valid):
                    m.d.comb += [aslot_wr.addr.eq(rsp_x), aslot_wr.data.eq(
                        active.slots.payload.active_slot), aslot_wr.en.eq(1)]
                    m.d.sync += rsp_x.eq(rsp_x + 1)
                with m.If(active.count.valid):
                    m.d.sync += [active_count.eq(active.count.payload.active_count),
                                 b.eq(0), i.eq(0), j.eq(0), rsp_x.eq(0)]
                    m.next = "RUN_WRITE"

            with m.State("RUN_WRITE"):
                # result records: 10 header words, accept_index [S], predicts [n], evict bits
                words_per = p.verify_result_words + steps + vn + ((vn + 31) >> 5)
                m.d.comb += [vres_rd.addr.eq(b), accidx_rd.addr.eq(b), inverse_rd.addr.eq(b),
                             aslot_rd.addr.eq(b)]
                x, y, zz = (Signal(range(MAXV + p.max_steps + 64), name=name)
                            for name in ("past_header", "predicts_index", "evict_index"))
                m.d.comb += [x.eq(i - p.verify_result_words), y.eq(x - steps), zz.eq(y - vn)]
                taken = rwriter.words.valid & rwriter.words.ready
                m.d.comb += predicts_rd.addr.eq(b * vn + y + taken)
                with m.If(j == 0):
                    m.d.comb += [rwriter.start.eq(1), rwriter.address.eq(cmd.address2),
                                 rwriter.count.eq(batch * words_per)]
                    m.d.sync += j.eq(1)
                with m.Elif(b == batch):
                    with m.If(~rwriter.busy):
                        m.d.sync += [j.eq(0), i.eq(0), b.eq(0)]
                        m.next = "RUN_VERIFIED"
                with m.Elif(j == 1):  # the request's rows are being read
                    m.d.comb += predicts_rd.addr.eq(b * vn)
                    m.d.sync += [j.eq(2), i.eq(0)]
                with m.Else():
                    r = vres_rd.data
                    evict_words = -(-MAXV // 32)
                    evict = Cat(r.evict, Const(0, 32 * evict_words - MAXV))
                    evict_word = Signal(32)
                    m.d.comb += evict_word.eq(evict.word_select(zz[:index_bits(evict_words)], 32)
                                              if evict_words > 1 else evict)
                    header_words = Array([r.accept_token_num, r.accept_length, r.next_root,
                                          r.finished, r.seq_len, r.nan, r.offset,
                                          aslot_rd.data, inverse_rd.data, r.rows])
                    value = Signal(32)
                    with m.If(i < p.verify_result_words):
                        m.d.comb += value.eq(header_words[i])
                    with m.Elif(x < steps):
                        m.d.comb += value.eq(accidx_rd.data[x])
                    with m.Elif(y < vn):
                        m.d.comb += value.eq(predicts_rd.data)
                    with m.Else():
                        m.d.comb += value.eq(evict_word)
                    m.d.comb += [rwriter.words.valid.eq(1), rwriter.words.payload.eq(value)]
                    with m.If(rwriter.words.ready):
                        m.d.sync += i.eq(i + 1)
                        with m.If(i == words_per - 1):
                            m.d.sync += [b.eq(b + 1), i.eq(0), j.eq(1)]

            with m.State("RUN_VERIFIED"):
                # verified_id, the accepted tokens of the batch in one list
                taken = rwriter.words.ready & (j == 2)
                m.d.comb += vids_rd.addr.eq(i + taken)
                with m.If(j == 0):
                    with m.If(~rwriter.busy):
                        m.d.comb += [rwriter.start.eq(1), rwriter.address.eq(cmd.address3),
                                     rwriter.count.eq(verified_total)]
                        m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    m.d.sync += j.eq(2)
                with m.Elif(i == verified_total):
                    with m.If(~rwriter.busy & ~twriter.busy):
                        m.d.sync += [phase.eq(_Phase.IDLE), j.eq(0), i.eq(0)]
                        m.next = "COMPLETE"
                with m.Else():
                    m.d.comb += [rwriter.words.valid.eq(1), rwriter.words.payload.eq(vids_rd.data)]
                    with m.If(rwriter.words.ready):
                        m.d.sync += i.eq(i + 1)

            with m.State("COMPLETE"):
                out = self.completion.payload
                m.d.comb += [self.completion.valid.eq(1), out.tag.eq(cmd.tag),
                             out.opcode.eq(cmd.opcode), out.status.eq(status),
                             out.next_tree_width.eq(next_width),
                             out.stop_reason.eq(stop_reason), out.verify_size.eq(vn),
                             out.active_count.eq(active_count), out.rows_read.eq(rows_read)]
                with m.If(self.completion.ready):
                    m.next = "IDLE"

        return m
