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

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.kernels.score_sort import SORT_WIDTHS, ScoreSortParams, ScoreSortPipeline
from hw.kernels.tree_mask import TreeMask, TreeMaskMode, TreeMaskParams
from hw.kernels.update_state import Region, UpdateCumuDraftState, UpdateStateParams
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

    def check(self):
        UpdateStateParams(**self._k2_fields())
        self.k4  # noqa: B018 (checks MAXV <= MAXN)
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
            "address0": a, "address1": a, "address2": a, "address3": a, "address4": a,
        })

    @cached_property
    def completion_layout(self) -> data.StructLayout:
        """One completion: the command's ``tag`` and ``opcode``, ``status``, and for
        ``draft_depth`` the ``next_tree_width`` and ``stop_reason``."""
        return data.StructLayout({"tag": 16, "opcode": 4, "status": 3, "next_tree_width": 8,
                                  "stop_reason": 3, "verify_size": 16})

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
        return ("read", "result_write", "mask_write", "table_write")


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
        for index, (name, unit, beat) in enumerate((
                ("read", reader, self.read.r), ("result_write", rwriter, self.result_write.w),
                ("mask_write", mwriter, self.mask_write.w),
                ("table_write", twriter, self.table_write.w))):
            m.submodules[f"{name}_counters"] = counters = PortCounters(port_bits=p.port_bits)
            m.d.comb += [counters.beat.eq(beat.valid & beat.ready), counters.busy.eq(unit.busy)]
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

        cfg = self.config
        words_taken = words.valid & words.ready

        def row(index, *, new=False):
            """Address of batch row ``index`` in the round's bank (``new``: the other)."""
            return Mux(bank ^ new, MAXB, 0) + index

        def kv_row(index, x, *, new=False):
            return row(index, new=new) * p.kv_slots + x

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
                             locs_wr.en.eq(words_taken)]
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

            with m.State("COMPLETE"):
                out = self.completion.payload
                m.d.comb += [self.completion.valid.eq(1), out.tag.eq(cmd.tag),
                             out.opcode.eq(cmd.opcode), out.status.eq(status),
                             out.next_tree_width.eq(next_width),
                             out.stop_reason.eq(stop_reason), out.verify_size.eq(vn)]
                with m.If(self.completion.ready):
                    m.next = "IDLE"

        return m
