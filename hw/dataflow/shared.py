"""What the engine's commands share, as the sequencer links them to it
(``hw/dataflow/command_links.py``): the round in flight's registers (``RoundState``), the batch
and verify-tree memories (``RoundMemories``) and the kernels and memory ports that more than
one command uses (``EngineShared``). Each is a declared record, built once in
``PersistentEngine.elaborate``; a command component reaches none of it but through its own
members."""

from dataclasses import dataclass

from amaranth.hdl import Module, Mux, Signal, Value, signed
from amaranth.lib import stream
from amaranth.lib.memory import Memory

from .load_tree import verify_tree_layout
from .read_state import slot_info_layout
from .runs import memory
from .word_banks import WordBanks

__all__ = ["RoundState", "RoundMemories", "EngineShared"]


@dataclass(frozen=True)
class RoundState:
    """The round in flight: the sequencer's registers, set from the commands' ``done``.

    ``phase`` (``Phase``), ``batch`` (its requests), ``verify_num``, ``depths`` (to draft),
    ``depths_run``, ``depth`` (the frontier's depth label), ``width`` (the frontier's width),
    ``input_count`` (draft inputs per request), ``cumu_count`` (nodes per request),
    ``stop_kind`` (the ``StopReason`` that ended drafting), ``vn`` (the verify set's size),
    ``in_round`` (a bit per slot the round has), and loop bounds less one, each set in the
    clock its count is (a counter compared with a register: no subtraction's carry chain in
    front of the counters' next-state logic; signed, so that a zero count's -1 matches no
    counter): ``cumu_last``, ``vn_last`` and ``request_last`` (words of a verify request
    record).
    """

    phase: Signal
    batch: Signal
    verify_num: Signal
    depths: Signal
    depths_run: Signal
    depth: Signal
    width: Signal
    input_count: Signal
    cumu_count: Signal
    cumu_last: Signal
    stop_kind: Signal
    vn: Signal
    vn_last: Signal
    request_last: Signal
    in_round: Signal

    @classmethod
    def create(cls, params) -> "RoundState":
        """The registers for the ``EngineParams`` ``params``."""
        p = params
        WM, MAXV = p.max_tree_width, p.max_verify_num
        nodes = p.max_node_count + p.max_candidates
        return cls(
            phase=Signal(2, name="phase"), batch=Signal(range(p.max_batch + 1), name="batch"),
            verify_num=Signal(signed(32), name="verify_num"), depths=Signal(8, name="depths"),
            depths_run=Signal(8, name="depths_run"), depth=Signal(8, name="depth"),
            width=Signal(range(WM + 1), name="width"),
            input_count=Signal(range(p.kv_slots + WM + 1), name="input_count"),
            cumu_count=Signal(range(nodes + 1), name="cumu_count"),
            cumu_last=Signal(range(-1, nodes), init=-1, name="cumu_last"),
            stop_kind=Signal(3, name="stop_kind"), vn=Signal(range(MAXV + 1), name="vn"),
            vn_last=Signal(range(-1, MAXV), init=-1, name="vn_last"),
            request_last=Signal(range(-1, p.verify_request_words + MAXV),
                                init=p.verify_request_words - 1, name="request_last"),
            in_round=Signal(p.max_batch, name="in_round"))

    def verify_size_is(self, value, params) -> list:
        """The statements that set ``vn`` and the loop bounds that follow it."""
        return [self.vn.eq(value), self.vn_last.eq(value - 1),
                self.request_last.eq(value + (params.verify_request_words - 1))]


@dataclass(frozen=True)
class RoundMemories:
    """The batch's inputs in two banks (``begin_round`` fills the idle one and swaps only once
    its checks pass, so a refused ``begin_round`` leaves the round in flight intact): slot,
    ``seq_len`` (with K4's two feeds), ``req_pool_index``, the draft inputs' KV slots; the
    roots; the verify KV slots (stored and copied out a read beat a clock, and K7's copy) and
    the verify tree; per slot what its last round left (``slot_info``, written when a new round
    begins; ``saved`` says which slots have such a record since reset, as memories keep their
    contents through a reset: ``saving`` sets ``saving_slot``'s bit) and its row in the round
    in flight (``slot_row``). ``*_rd``/``*_wr`` are read and write ports; ``bank`` is the
    round's bank.
    """

    params: object
    bank: Signal
    slot_rd: object
    slot_wr: object
    seq_rd: object
    seq_wr: object
    seq_k4_rd: object
    seq_mask_rd: object
    pool_rd: object
    pool_wr: object
    kv_rd: object
    kv_wr: object
    root_rd: object
    root_wr: object
    locs: WordBanks
    locs2: WordBanks
    vtree_rd: object
    vtree_wr: object
    info_rd: object
    info_wr: object
    slot_row_rd: object
    slot_row_wr: object
    saved: Signal
    saving: Signal
    saving_slot: Signal

    @classmethod
    def create(cls, m: Module, params) -> "RoundMemories":
        """The memories, submodules of ``m``, for the ``EngineParams`` ``params``."""
        p = params
        MAXB, MAXV = p.max_batch, p.max_verify_num
        lanes = p.port_bits // 32

        slot_rd, slot_wr = memory(m, "batch_slot", range(MAXB), 2 * MAXB)
        seq_mem = m.submodules.batch_seq_len = Memory(shape=32, depth=2 * MAXB, init=[])
        pool_rd, pool_wr = memory(m, "batch_pool", 32, 2 * MAXB)
        kv_rd, kv_wr = memory(m, "batch_kv_slots", 32, 2 * MAXB * p.kv_slots)
        root_rd, root_wr = memory(m, "batch_root", 32, MAXB)
        locs = m.submodules.verify_cache_locs = WordBanks(depth=MAXB * MAXV, lanes=lanes)
        locs2 = m.submodules.verify_cache_locs_k7 = WordBanks(depth=MAXB * MAXV, lanes=lanes)
        vtree_rd, vtree_wr = memory(m, "verify_tree", verify_tree_layout, MAXB * MAXV)
        info_rd, info_wr = memory(m, "slot_info", slot_info_layout, MAXB)
        slot_row_rd, slot_row_wr = memory(m, "slot_row", range(MAXB), MAXB)
        saved = Signal(MAXB, name="saved")
        saving, saving_slot = Signal(name="saving"), Signal(range(MAXB), name="saving_slot")
        with m.If(saving):
            m.d.sync += saved.eq(saved | (1 << saving_slot))
        return cls(
            params=p, bank=Signal(name="bank"), slot_rd=slot_rd, slot_wr=slot_wr,
            seq_rd=seq_mem.read_port(), seq_wr=seq_mem.write_port(),
            seq_k4_rd=seq_mem.read_port(), seq_mask_rd=seq_mem.read_port(),
            pool_rd=pool_rd, pool_wr=pool_wr, kv_rd=kv_rd, kv_wr=kv_wr,
            root_rd=root_rd, root_wr=root_wr, locs=locs, locs2=locs2,
            vtree_rd=vtree_rd, vtree_wr=vtree_wr, info_rd=info_rd, info_wr=info_wr,
            slot_row_rd=slot_row_rd, slot_row_wr=slot_row_wr, saved=saved, saving=saving,
            saving_slot=saving_slot)

    def row(self, index, *, new=False) -> Value:
        """Address of batch row ``index`` in the round's bank (``new``: the other)."""
        return Mux(self.bank ^ new, self.params.max_batch, 0) + index

    def kv_row(self, index, x, *, new=False) -> Value:
        """Address of KV slot ``x`` of batch row ``index`` (``new``: in the other bank)."""
        return self.row(index, new=new) * self.params.kv_slots + x


@dataclass(frozen=True)
class EngineShared:
    """What the sequencer links its commands to: the engine's ``config``, the ``command`` in
    flight (registered), the ``round`` and its memories (``rows``), K2 (``k2``) and its host
    port's commands (``host_cmd``, through a register slice; ``host_idle``: none waits), the
    sequencer's reader (``reader``) and the result, mask and table writers."""

    config: Value
    command: Value
    round: RoundState
    rows: RoundMemories
    k2: object
    host_cmd: stream.Interface
    host_idle: Value
    reader: object
    rwriter: object
    mwriter: object
    twriter: object
