"""The persistent engine's build parameters (:class:`EngineParams`): the kernels' parameter
records, the record and run sizes, the command, completion and config layouts and the port
counters' layout (``counter_layout``), for ``hw.dataflow.engine.PersistentEngine`` and its
hosts."""

from dataclasses import dataclass
from functools import cached_property

from amaranth.hdl import signed
from amaranth.lib import data

from hw.kernels.score_sort import SORT_WIDTHS, ScoreSortParams
from hw.kernels.tree_mask import TreeMaskParams
from hw.kernels.tree_verify import TreeVerifyParams
from hw.kernels.update_state import UpdateStateParams
from hw.kernels.verify_result import VerifyResultParams
from hw.kernels.work_deltas import WorkDeltasParams
from hw.lib.params import ParameterRecord, parameter

from .memory_ports import COUNTER_BITS
from .records import ARGUMENT, FRONTIER, REQUEST, RESULT, TREE

__all__ = ["EngineParams", "counter_layout"]

counter_layout = data.StructLayout({"beats": COUNTER_BITS, "bytes": COUNTER_BITS,
                                    "busy_cycles": COUNTER_BITS, "stall_cycles": COUNTER_BITS})


@dataclass(frozen=True)
class EngineParams(ParameterRecord):
    """Validated build parameters of :class:`PersistentEngine` and its port layouts."""

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
    address_width: int = parameter(40, "Bits of byte addresses.", lo=16, hi=64)
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
        _ = self.k4, self.verify  # their own checks (K4: MAXV <= MAXN; the fused verify's)
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

    #: Fixed words of a verify request record (``records.REQUEST``; then its ``n`` coins) and
    #: of a verify result record (``records.RESULT``; then its rows).
    verify_request_words = REQUEST.size
    verify_result_words = RESULT.size

    @cached_property
    def k3(self) -> WorkDeltasParams:
        return WorkDeltasParams(node_top_k=self.node_top_k, max_verify_num=self.max_verify_num,
                                lanes=self.port_bits // 32, max_batch_size=self.max_batch)

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
        """Words of one ``begin_round`` argument record (``records.ARGUMENT``): its fixed
        fields, then the ``MI + 1`` draft KV slots."""
        return ARGUMENT.size + self.kv_slots

    @property
    def mask_words(self) -> int:
        """Words of one frontier mask row (``MI`` columns, bit ``j`` of word ``j // 32``)."""
        return max(1, -(-self.max_input_size // 32))

    @property
    def frontier_words(self) -> int:
        """Words of one frontier record (``records.FRONTIER``): its fixed fields, then the
        mask row."""
        return FRONTIER.size + self.mask_words

    #: Words of one verify-tree record (``records.TREE``).
    tree_words = TREE.size

    @property
    def result_group_words(self) -> int:
        """Most words of one transfer into the result writer: a frontier or tree record, or
        the rest of a read beat (``kv_indices``' table prefixes)."""
        return max(self.frontier_words, self.tree_words, self.port_bits // 32)

    @property
    def max_run_words(self) -> int:
        """Longest run of words a port moves for one command."""
        v = self.max_verify_num
        return self.max_batch * max(self.argument_words, self.max_candidates,
                                    self.max_tree_width * self.frontier_words,
                                    v * self.tree_words, self.max_seq_len + v,
                                    -(-v * (self.max_seq_len + v) // 4))

    @property
    def watchdog_cycles(self) -> int:
        """The watchdog's bound (clocks from a command's acceptance) when the ``config``
        port's ``watchdog_cycles`` is 0: 16 times a bound on the longest command with a memory
        that answers at once (the runs of one command, at most twice the longest; the fused
        verify's rows, at most ``max_steps + 1`` per request, each 4 passes over
        ``max_vocab_size`` logits plus 64 clocks; K2's and ``read_state``'s work, 8 clocks
        per node and score of every request's tree; K1 to K3, 16 clocks per candidate),
        rounded up to a power of two. The factor 16 covers memory latency and back-pressure;
        a command that takes longer than that is hung (docs/engine.md, "The watchdog")."""
        v, steps, batch = self.max_verify_num, self.max_steps, self.max_batch
        logit_bits = 16 if self.logit_format == "bfloat16" else 32
        row_beats = -(-self.max_vocab_size * logit_bits // (self.logit_ports
                                                            * self.logit_port_bits))
        work = (2 * self.max_run_words + batch * (steps + 1) * (4 * row_beats + 64)
                + batch * 8 * (self.max_node_count + 2 * v + self.node_top_k)
                + batch * 16 * self.max_candidates)
        return 1 << (16 * work - 1).bit_length()

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
            "slot": 16, "lfsr": 1, "eos_token_id": signed(32), "threshold_single": 32,
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
        ``cost_per_node`` (float32 bits), ``watchdog_cycles`` (the watchdog's bound; 0: the
        build's, :attr:`watchdog_cycles`)."""
        return data.StructLayout({
            "req_to_token": self.address_width, "pool_rows": 32, "context_len": 32,
            "vocab_size": 32, "cost_per_node": 32, "watchdog_cycles": 32,
        })

    @property
    def port_names(self) -> tuple[str, ...]:
        """The memory ports, in counter order."""
        return ("read", "result_write", "mask_write", "table_write") + tuple(
            f"logits{port}" for port in range(self.logit_ports))
