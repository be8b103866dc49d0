"""Command-level golden model of the persistent engine (docs/kernels.md §11, docs/engine.md).

The engine keeps, per request slot, the round's cumulative tree, ``sort_scores``,
``work_scores`` and the draft tree mask, and runs commands instead of kernel launches. This
model is built from the kernel goldens and changes none of their semantics: a round driven
through it equals ``golden.draft_round`` (with the same per-depth widths), then
``fused_tree_mask_operator`` (§6), ``tree_speculative_sampling_from_logits`` (§10, or its
LFSR-coin variant), ``update_verify_result`` and ``compact_active_slots`` (§9), with the P1
metadata of ``golden.verify_metadata``.

Conventions fixed here (the spec is silent on them; docs/engine.md):

* One round is in flight at a time; its batch is the slot list of ``begin_round`` (batch row
  ``b`` is ``slots[b]``), because the width policy is batch-level. ``begin_round`` may start
  a new round at any time (an unfinished one is abandoned). Slots outside the batch keep the
  state their last round left (``read_state``).
* The draft model's inputs in a round are the root (input 0) and each depth's frontier in slot
  order; input ``j`` of request ``b`` stores its KV at ``draft_cache_locs[b, j]``, written to
  ``req_to_token[req_pool_indices[b], seq_lens[b] + j]`` by ``begin_round``
  (``assign_draft_cache_locs`` with ``S = max_input_size + 1``). A frontier node at depth label
  ``d`` has position ``seq_lens[b] + d``.
* ``build_verify`` writes the verify forward's KV slots to ``req_to_token`` at ``seq_lens[b] ..
  seq_lens[b] + n - 1`` (``assign_req_to_token_pool``) and returns the KV index list over
  ``0 .. seq_lens[b] + n - 1`` (``compute_kv_indices``); ``verify`` commits with K7 using the
  same slots as ``out_cache_loc`` and ``S = depths run + 1`` as ``num_speculative_tokens``.
* A bad command changes nothing and completes with an error ``Status`` and a message; argument
  arrays of the wrong shape or dtype are host errors (``ValueError``), not completions.
"""

import enum
import numbers
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ._abi import check_array, check_index_range, check_int
from .active_slots import compact_active_slots
from .draft_round import (
    DraftRoundConfig,
    DraftSample,
    Frontier,
    _initial_state,
    _next_frontier,
    _run_depth,
    _State,
    _stop_reason,
)
from .tree_mask import TreeMaskMode, fused_tree_mask_operator, tree_mask_size, verify_set_size
from .tree_verify import (
    draft_tree_reject_sample_from_logits,
    tree_speculative_sampling_from_logits,
    visited_rows,
)
from .update_state import clamp_verify_num
from .verify_metadata import (
    assign_draft_cache_locs,
    assign_req_to_token_pool,
    compute_kv_indices,
    verify_forward_indptrs,
)
from .verify_result import update_verify_result

__all__ = ["Status", "Phase", "EngineConfig", "Completion", "SlotState", "Engine",
           "loadable_tree_error"]


class Status(enum.IntEnum):
    """A command's completion code."""

    OK = 0
    BAD_SLOT = 1  # a slot outside 0 .. max_batch-1 or repeated
    BAD_WIDTH = 2  # a width above max_tree_width (or negative)
    BAD_PHASE = 3  # out of order: no round, drafting over, verify before build, ...
    NODE_BUDGET = 4  # the depth would overflow the node or input budget
    BAD_ARGUMENT = 5  # a value the engine cannot take (token outside the vocabulary, ...)
    # The hardware's watchdog cut the command off (docs/engine.md, "The watchdog"); the golden
    # never completes with it: :meth:`Engine.abandon_round` is what the engine did after it.
    WATCHDOG = 6


class Phase(enum.IntEnum):
    """Where a slot's round stands."""

    IDLE = 0  # no round (or its round was verified)
    DRAFTING = 1  # begun; the next depth may be drafted
    DRAFTED = 2  # drafting ended (a stop rule); only build_verify is next
    BUILT = 3  # the verify tree is built; verify is next


@dataclass(frozen=True)
class EngineConfig:
    """The engine's build parameters (what sizes its on-chip memories).

    Fields: ``max_batch`` slots; ``node_top_k`` K; ``max_tree_width``; ``max_depths`` depth
    labels per round; ``max_verify_num`` MAXV; ``max_node_count`` MAXN; ``max_input_size`` MI
    (draft-model inputs per round besides the root); ``vocab_size`` V (token ids and logits
    rows); ``sort_width``; ``cost_per_node`` of the width policy.
    """

    node_top_k: int
    max_tree_width: int
    max_depths: int
    max_verify_num: int
    max_node_count: int
    max_input_size: int
    vocab_size: int
    max_batch: int = 128
    sort_width: int = 64
    cost_per_node: float = 0.0

    def __post_init__(self):
        """Validate through a one-request ``DraftRoundConfig`` plus the engine's own fields."""
        self.round_config(1, self.max_verify_num, self.max_depths)
        check_int("max_batch", self.max_batch, 1)
        check_int("vocab_size", self.vocab_size, self.node_top_k, lo_name="`node_top_k`")

    def round_config(self, batch_size, verify_num, depths) -> DraftRoundConfig:
        """The ``DraftRoundConfig`` of a round of ``batch_size`` requests."""
        return DraftRoundConfig(
            batch_size=batch_size, node_top_k=self.node_top_k,
            max_tree_width=self.max_tree_width, depths=depths, verify_num=verify_num,
            max_verify_num=self.max_verify_num, max_node_count=self.max_node_count,
            max_input_size=self.max_input_size, cost_per_node=self.cost_per_node,
            sort_width=self.sort_width)


@dataclass
class Completion:
    """What a command signals: ``status``, a ``message`` for errors, and its ``outputs``
    (numpy arrays and ints, by name; empty on error)."""

    command: str
    status: Status
    message: str = ""
    outputs: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


@dataclass
class SlotState:
    """One slot's on-chip state (``read_state``): the round's phase, request inputs and tree
    rows (``cumu_*``, links, ``sort_scores``, ``work_scores``), ``cumu_count``, ``seq_len``
    after the last verify."""

    phase: Phase = Phase.IDLE
    seq_len: int = 0
    req_pool_index: int = -1
    cumu_count: int = 0
    tree: dict = field(default_factory=dict)

    def copy(self) -> "SlotState":
        return SlotState(self.phase, self.seq_len, self.req_pool_index, self.cumu_count,
                         {name: row.copy() for name, row in self.tree.items()})


_TREE_ROWS = ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
              "side_indexs", "sort_scores", "work_scores")


class _CommandError(Exception):
    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class _Round:
    """The round in flight: its batch, inputs and the state ``draft_round`` keeps."""

    slots: np.ndarray
    config: DraftRoundConfig
    seq_lens: np.ndarray
    req_pool_indices: np.ndarray
    draft_cache_locs: np.ndarray
    state: _State
    frontier: Frontier
    mask: np.ndarray
    input_count: int = 1
    depths_run: int = 0
    phase: Phase = Phase.DRAFTING
    stop_reason: str = ""
    verify: dict = field(default_factory=dict)


class Engine:
    """The engine's command-level golden model.

    Parameters
    ----------
    config : EngineConfig
    req_to_token : ndarray i64 [P, C]
        The request-to-KV-slot map in card memory (read and written in place).
    hot_token_id : ndarray i64 [V_hot] or None
        K1's draft-to-target vocabulary map, when the draft model has its own vocabulary.

    Commands return a :class:`Completion`; see the module docstring for the conventions.
    """

    def __init__(self, config: EngineConfig, req_to_token: np.ndarray, *, hot_token_id=None):
        if not isinstance(config, EngineConfig):
            raise ValueError(f"`config` must be an EngineConfig, not {type(config).__name__}")
        if not isinstance(req_to_token, np.ndarray) or req_to_token.ndim != 2 \
                or req_to_token.dtype != np.int64:
            raise ValueError("`req_to_token` must be an int64 numpy array [pool rows, context]")
        self.config = config
        self.req_to_token = req_to_token
        self.hot_token_id = hot_token_id
        self._slots = [SlotState() for _ in range(config.max_batch)]
        self._round: _Round | None = None

    # --- commands -------------------------------------------------------------------------

    def begin_round(self, slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs, *,
                    verify_num, depths=None) -> Completion:
        """Start a round on ``slots`` (i64 [B]): roots ``root_tokens`` [B], verified lengths
        ``seq_lens`` [B], ``req_to_token`` rows ``req_pool_indices`` [B], the draft inputs' KV
        slots ``draft_cache_locs`` [B, max_input_size + 1]; ``verify_num`` (clamped to
        ``1 .. max_verify_num``), ``depths`` depth labels at most (default ``max_depths``)."""
        c = self.config
        slots = _int_array("slots", slots, None)
        b = len(slots)
        root_tokens = _int_array("root_tokens", root_tokens, (b,))
        seq_lens = _int_array("seq_lens", seq_lens, (b,))
        pools = _int_array("req_pool_indices", req_pool_indices, (b,))
        locs = _int_array("draft_cache_locs", draft_cache_locs, (b, c.max_input_size + 1))
        depths = c.max_depths if depths is None else depths

        def run():
            self._check_slots(slots)
            _check_range("root_tokens", root_tokens, c.vocab_size)
            _check_range("req_pool_indices", pools, self.req_to_token.shape[0])
            if len(set(pools.tolist())) != b:
                raise _CommandError(Status.BAD_ARGUMENT, "`req_pool_indices` repeats a row")
            if b and (seq_lens.min() < 0 or (seq_lens + max(c.max_input_size + 1, c.max_verify_num)
                                             > self.req_to_token.shape[1]).any()):
                raise _CommandError(Status.BAD_ARGUMENT, "`seq_lens` must leave room for the "
                                    "round in the `req_to_token` rows")
            with _refused_as(Status.BAD_ARGUMENT):
                # (a zero batch keeps a one-request configuration; nothing reads it)
                config = c.round_config(max(b, 1), verify_num, check_int(
                    "depths", depths, 1, c.max_depths, hi_name="`max_depths`"))
                assign_draft_cache_locs(self.req_to_token, pools, seq_lens, locs.reshape(-1),
                                        c.max_input_size + 1)
            state = _initial_state(config, root_tokens) if b else None
            frontier = Frontier(depth=1, node_ids=np.zeros((b, 1), np.int64),
                                tokens=root_tokens.reshape(b, 1).copy(),
                                scores=np.ones((b, 1), np.float32),
                                hidden_states=np.zeros((b, 1, 0), np.float32))
            self._round = _Round(slots=slots, config=config, seq_lens=seq_lens,
                                 req_pool_indices=pools, draft_cache_locs=locs, state=state,
                                 frontier=frontier, mask=np.zeros((b, 1, 0), np.bool_))
            self._store(Phase.DRAFTING)
            return {"batch_size": b}
        return self._execute("begin_round", run)

    def draft_depth(self, probas, tokens, *, width=None) -> Completion:
        """Draft one depth: the draft model's top-K ``probas`` f32 [B, W*K] and ``tokens``
        i64 [B, W*K] for the current frontier (W wide) run K1 -> K2 -> K3 -> width policy;
        ``width`` replaces the policy's next width. Outputs: ``next_tree_width``,
        ``stop_reason`` ("" while drafting goes on) and the next frontier: ``tokens``,
        ``parent_indices`` (each node's parent slot in this frontier, for the draft model's
        hidden-state gather), ``node_ids``, ``positions``, ``tree_mask`` [B, W', inputs-1],
        ``kv_slots`` [B, W'] (all with W' = 0 when drafting stops)."""
        c = self.config
        r = self._round
        if self._in_phase(Phase.DRAFTING):  # else a phase error, whatever the shapes
            b, w = r.frontier.node_ids.shape
            probas = check_array("probas", probas, (b, w * c.node_top_k), np.float32)
            tokens = _int_array("tokens", tokens, (b, w * c.node_top_k))

        def run():
            if r is None or r.phase in (Phase.IDLE, Phase.BUILT):
                raise _CommandError(Status.BAD_PHASE, "no round is drafting")
            if width is not None and (isinstance(width, bool) or not isinstance(
                    width, int | np.integer) or not 0 <= width <= c.max_tree_width):
                raise _CommandError(Status.BAD_WIDTH, f"`width` must be between 0 and "
                                    f"`max_tree_width` ({c.max_tree_width}), not {width!r}")
            if r.phase == Phase.DRAFTED:
                status = (Status.NODE_BUDGET if r.stop_reason in ("node_budget", "input_budget")
                          else Status.BAD_PHASE)
                raise _CommandError(status, f"drafting ended ({r.stop_reason})")
            vocab = c.vocab_size if self.hot_token_id is None else len(self.hot_token_id)
            _check_range("tokens", tokens, vocab)
            if b == 0:
                r.depths_run += 1
                return _frontier_outputs(0, 0, "", None, None, None)
            sample = DraftSample(probas=probas, tokens=tokens)
            state = _copy_state(r.state)
            with _refused_as(Status.BAD_ARGUMENT):
                record = _run_depth(r.config, state, r.frontier, r.input_count, r.mask,
                                    lambda depth, frontier: sample, self.hot_token_id,
                                    None if width is None else int(width))
            stop = _stop_reason(r.config, record, state.cumu_count, r.input_count)
            r.state, r.depths_run = state, r.depths_run + 1
            if stop:
                r.phase, r.stop_reason = Phase.DRAFTED, stop
                self._store(Phase.DRAFTED)
                return _frontier_outputs(b, record.next_tree_width, stop, None, None, None)
            input_count = r.input_count
            r.frontier, r.mask, r.input_count = _next_frontier(record, input_count)
            self._store(Phase.DRAFTING)
            width_next = record.next_tree_width
            kv = r.draft_cache_locs[:, input_count:input_count + width_next]
            return _frontier_outputs(b, width_next, "", record, r, kv)
        return self._execute("draft_depth", run)

    def build_verify(self, tree_mask_mode, verify_cache_locs) -> Completion:
        """K4 on the round's tree and the verify forward's metadata: ``verify_cache_locs``
        i64 [B*n] (the verify forward's KV slots, ``n`` the verify-set size, readable from
        ``verify_size()``). Outputs: ``n``, ``tree_mask``, ``positions``, ``retrive_index``,
        ``retrive_next_token``, ``retrive_next_sibling``, ``draft_tokens``, ``qo_indptr``,
        ``kv_indptr``, ``mask_indptr``, ``kv_indices``."""
        r = self._round
        if self._in_phase(Phase.DRAFTING, Phase.DRAFTED) and r.depths_run:
            b, n = len(r.slots), self.verify_size()
            locs = _int_array("verify_cache_locs", verify_cache_locs, (b * n,))

        def run():
            if r is None or r.phase not in (Phase.DRAFTING, Phase.DRAFTED) or r.depths_run == 0:
                raise _CommandError(Status.BAD_PHASE, "build_verify needs a drafted round")
            try:
                mode = TreeMaskMode(tree_mask_mode)
            except ValueError:
                raise _CommandError(Status.BAD_ARGUMENT, f"`tree_mask_mode` must be 0, 1 or 2, "
                                    f"not {tree_mask_mode!r}") from None
            s = r.state
            mask = np.zeros(tree_mask_size(mode, r.seq_lens, n),
                            np.uint8 if mode == TreeMaskMode.QLEN_ONLY_BITPACKING else np.bool_)
            out = {"n": n, "tree_mask": mask, "positions": np.zeros(b * n, np.int64),
                   **{name: np.zeros((b, n), np.int64) for name in (
                       "retrive_index", "retrive_next_token", "retrive_next_sibling")},
                   "draft_tokens": np.zeros(b * n, np.int64)}
            if b:
                with _refused_as(Status.BAD_ARGUMENT):
                    fused_tree_mask_operator(
                        s.cumu_tokens, s.cumu_scores, s.cumu_deltas, s.prev_indexs,
                        s.next_indexs, s.side_indexs, r.seq_lens, b, s.cumu_count,
                        clamp_verify_num(r.config.verify_num, r.config.max_verify_num),
                        r.config.max_node_count, mode, mask, out["positions"],
                        out["retrive_index"], out["retrive_next_token"],
                        out["retrive_next_sibling"], out["draft_tokens"])
            assign_req_to_token_pool(r.req_pool_indices, self.req_to_token, r.seq_lens,
                                     r.seq_lens + n, locs)
            qo, kv, mask_indptr = verify_forward_indptrs(r.seq_lens, n, mode)
            kv_indices = np.zeros(int(kv[-1]), np.int64)
            compute_kv_indices(self.req_to_token, r.req_pool_indices,
                               np.zeros(b, np.int64), r.seq_lens + n, kv.copy(), kv_indices)
            out.update(qo_indptr=qo, kv_indptr=kv, mask_indptr=mask_indptr,
                       kv_indices=kv_indices)
            r.verify = {"n": n, "cache_locs": locs.copy(), **out}
            r.phase = Phase.BUILT
            self._store(Phase.BUILT)
            return out
        return self._execute("build_verify", run)

    def load_tree(self, draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
                  verify_cache_locs, *, num_speculative_tokens) -> Completion:
        """A verify tree the caller built (SGLang's ``build_tree_kernel_efficient``, ...) in
        place of ``build_verify``'s, for ``verify``: ``draft_tokens`` i64 [B*n] (the
        candidates), ``retrive_index``, ``retrive_next_token``, ``retrive_next_sibling`` i64
        [B, n], the verify forward's KV slots ``verify_cache_locs`` i64 [B*n] (K7's
        ``out_cache_loc``) and ``num_speculative_tokens`` ``S`` (``verify``'s, instead of the
        depths run + 1). Nothing is written to ``req_to_token`` (the caller placed the verify
        forward's slots). Outputs: ``n``.

        In order: ``BAD_PHASE`` unless a round is drafting (``DRAFTING`` or ``DRAFTED``);
        ``BAD_ARGUMENT`` unless ``1 <= n <= max_verify_num`` and ``2 <= S <= max_depths + 1``,
        and unless every request's tree is one whose walk ends (docs/engine.md, "Loading a
        caller's tree"): tokens in ``0 .. vocab_size - 1``, ``retrive_index[b, i] == b*n + i``,
        links -1 or in ``1 .. n - 1``, no node the target of two links. Accepted, the round is
        ``BUILT`` (drafting ends)."""
        c = self.config
        r = self._round
        drafting = self._in_phase(Phase.DRAFTING, Phase.DRAFTED)
        if drafting:
            b = len(r.slots)
            index = _int_array2("retrive_index", retrive_index, b)
            n = index.shape[1]
            links = [_int_array("retrive_next_token", retrive_next_token, (b, n)),
                     _int_array("retrive_next_sibling", retrive_next_sibling, (b, n))]
            tokens = _int_array("draft_tokens", draft_tokens, (b * n,))
            locs = _int_array("verify_cache_locs", verify_cache_locs, (b * n,))

        def run():
            if not drafting:
                raise _CommandError(Status.BAD_PHASE, "load_tree needs a drafting round")
            if not 1 <= n <= c.max_verify_num:
                raise _CommandError(Status.BAD_ARGUMENT, f"the tree's n ({n}) must be between "
                                    f"1 and `max_verify_num` ({c.max_verify_num})")
            steps = num_speculative_tokens
            if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) \
                    or not 2 <= steps <= c.max_depths + 1:
                raise _CommandError(Status.BAD_ARGUMENT, f"`num_speculative_tokens` must be "
                                    f"between 2 and `max_depths` + 1 ({c.max_depths + 1}), "
                                    f"not {steps!r}")
            _check_range("draft_tokens", tokens, c.vocab_size)
            error = loadable_tree_error(index, *links)
            if error:
                raise _CommandError(Status.BAD_ARGUMENT, error)
            r.verify = {"n": n, "cache_locs": locs.copy(), "draft_tokens": tokens.copy(),
                        "retrive_index": index.copy(), "retrive_next_token": links[0].copy(),
                        "retrive_next_sibling": links[1].copy()}
            r.depths_run = int(steps) - 1
            r.phase = Phase.BUILT
            self._store(Phase.BUILT)
            return {"n": n}
        return self._execute("load_tree", run)

    def verify(self, target_logits, temperatures, max_seq_lens, *, eos_token_id=-1,
               uniform_samples=None, uniform_samples_for_final_sampling=None, seeds=None,
               threshold_single=1.0, threshold_acc=1.0, top_k=None, top_p=None) -> Completion:
        """The fused verify (§10) on ``target_logits`` f32 [B, n, V] with ``temperatures``
        [B] and the coins (``uniform_samples`` [B, n] and ``uniform_samples_for_final_sampling``
        [B], or LFSR ``seeds`` [B]), then K7 with ``max_seq_lens`` [B] and ``eos_token_id``
        and the active-slot compaction. Outputs: ``predicts``, ``accept_index``,
        ``accept_token_num``, ``accept_length``, ``verified_id`` (the accepted tokens),
        ``next_root``, ``evict_mask``, ``finished``, ``seq_lens`` (updated),
        ``active_slots``, ``active_inverse``, ``active_count``, ``nan_flags``, ``rows_read``."""
        c = self.config
        r = self._round
        if self._in_phase(Phase.BUILT):
            b, n = len(r.slots), r.verify["n"]
            logits = check_array("target_logits", target_logits, (b, n, c.vocab_size), np.float32)
            temperatures = check_array("temperatures", temperatures, (b,), np.float32)
            max_seq_lens = _int_array("max_seq_lens", max_seq_lens, (b,))
        if (seeds is None) == (uniform_samples is None):
            raise ValueError("give either `seeds` or `uniform_samples` (with "
                             "`uniform_samples_for_final_sampling`)")

        def run():
            if r is None or r.phase != Phase.BUILT:
                raise _CommandError(Status.BAD_PHASE, "verify needs a built verify tree")
            s = r.depths_run + 1
            v = r.verify
            out = {"predicts": np.zeros(b * n, np.int32),
                   "accept_index": np.zeros((b, s), np.int32),
                   "accept_token_num": np.zeros(b, np.int32),
                   "nan_flags": np.zeros(b, np.bool_)}
            rows = []
            candidates = v["draft_tokens"].reshape(b, n)
            tree = (candidates, v["retrive_index"], v["retrive_next_token"],
                    v["retrive_next_sibling"])
            seq_lens = r.seq_lens.copy()
            k7 = {"accept_length": np.zeros(b, np.int32),
                  "verified_id": np.zeros(b * s, np.int32),
                  "next_root": np.zeros(b, np.int64), "evict_mask": np.zeros(b * n, np.bool_),
                  "finished": np.zeros(b, np.bool_)}
            with _refused_as(Status.BAD_ARGUMENT):
                if b == 0:
                    pass
                elif seeds is not None:
                    draft_tree_reject_sample_from_logits(
                        out["predicts"], out["accept_index"], out["accept_token_num"], *tree,
                        seeds, logits, temperatures, threshold_single, threshold_acc, top_k,
                        top_p, nan_flags=out["nan_flags"], rows_read=rows)
                else:
                    tree_speculative_sampling_from_logits(
                        out["predicts"], out["accept_index"], out["accept_token_num"], *tree,
                        uniform_samples, uniform_samples_for_final_sampling, logits,
                        temperatures, threshold_single, threshold_acc, top_k, top_p,
                        nan_flags=out["nan_flags"], rows_read=rows)
                if b:
                    update_verify_result(
                        out["accept_index"], out["accept_token_num"], out["predicts"],
                        v["cache_locs"], r.req_pool_indices, max_seq_lens, b, n, s,
                        self.req_to_token.shape[1], eos_token_id, seq_lens, self.req_to_token,
                        *k7.values())
            k7["verified_id"] = k7["verified_id"][:int(k7["accept_length"].sum())]
            active = {"active_slots": np.zeros(b, np.int64),
                      "active_inverse": np.zeros(b, np.int64),
                      "active_count": np.zeros(1, np.int64)}
            compact_active_slots(k7["finished"], b, *active.values())
            out.update(k7, **active, seq_lens=seq_lens, rows_read=visited_rows(rows))
            r.phase = Phase.IDLE
            r.seq_lens = seq_lens
            self._store(Phase.IDLE)
            return out
        return self._execute("verify", run)

    def read_state(self, slot) -> Completion:
        """A slot's state (``outputs["state"]``, a :class:`SlotState` copy). ``slot`` must be
        an integer (``ValueError`` for a float, a string, ``None``, a bool: a host error);
        one outside ``0 .. max_batch - 1`` is ``BAD_SLOT``."""
        if isinstance(slot, bool | np.bool_) or not isinstance(slot, numbers.Integral):
            raise ValueError(f"`slot` must be an integer, not {slot!r}")

        def run():
            self._check_slots(np.array([slot], np.int64))
            return {"state": self._slots[int(slot)].copy()}
        return self._execute("read_state", run)

    def abandon_round(self) -> None:
        """What the hardware does after a ``WATCHDOG`` completion: the round in flight ends
        where its last completed command left it (each of its slots reads that state, as when
        a new round abandons it), and no round is in flight (only ``begin_round`` and
        ``read_state`` are in order). Nothing else changes."""
        self._round = None

    # --- queries and helpers --------------------------------------------------------------

    def verify_size(self) -> int:
        """``n`` of the round's verify tree as the tree stands (0 with no round)."""
        r = self._round
        if r is not None and r.phase == Phase.BUILT:  # (a loaded tree's n is the caller's)
            return r.verify["n"]
        if r is None or r.state is None:
            return 0
        return verify_set_size(clamp_verify_num(r.config.verify_num, r.config.max_verify_num),
                               r.state.cumu_count)

    def _in_phase(self, *phases) -> bool:
        return self._round is not None and self._round.phase in phases

    def _execute(self, name, run) -> Completion:
        """Run a command; an error leaves the engine as it was (memory included)."""
        saved_round = None if self._round is None else _copy_round(self._round)
        saved_slots = [state.copy() for state in self._slots]
        saved_table = self.req_to_token.copy()
        try:
            outputs = run()
        except Exception as error:
            self._round, self._slots = saved_round, saved_slots
            self.req_to_token[...] = saved_table
            if isinstance(error, _CommandError):
                return Completion(name, error.status, str(error))
            raise
        return Completion(name, Status.OK, "", outputs)

    def _check_slots(self, slots):
        bad = [int(s) for s in slots if not 0 <= s < self.config.max_batch]
        if bad:
            raise _CommandError(Status.BAD_SLOT, f"slot {bad[0]} is outside 0.."
                                f"{self.config.max_batch - 1}")
        if len(set(slots.tolist())) != len(slots):
            raise _CommandError(Status.BAD_SLOT, "a slot is listed twice")

    def _store(self, phase):
        """Write the round's rows into its slots' state."""
        r = self._round
        for b, slot in enumerate(r.slots):
            state = self._slots[int(slot)]
            state.phase, state.seq_len = phase, int(r.seq_lens[b])
            state.req_pool_index = int(r.req_pool_indices[b])
            state.cumu_count = r.state.cumu_count
            state.tree = {name: getattr(r.state, name)[b].copy() for name in _TREE_ROWS}


@contextmanager
def _refused_as(status):
    """Turn a golden op's ``ValueError`` into a completion error with ``status``."""
    try:
        yield
    except ValueError as error:
        raise _CommandError(status, str(error)) from error


def _copy_state(state: _State) -> _State:
    return _State(**{name: (value.copy() if isinstance(value, np.ndarray) else value)
                     for name, value in state.__dict__.items()})


def _copy_round(r: _Round) -> _Round:
    copy = _Round(**r.__dict__)
    copy.state = None if r.state is None else _copy_state(r.state)
    copy.verify = dict(r.verify)
    return copy


def _frontier_outputs(b, width, stop, record, r, kv):
    """``draft_depth``'s outputs (empty frontier arrays when drafting stops)."""
    if record is None:
        empty = np.zeros((b, 0), np.int64)
        return {"next_tree_width": int(width), "stop_reason": stop, "tokens": empty,
                "parent_indices": empty, "node_ids": empty, "positions": empty,
                "tree_mask": np.zeros((b, 0, 0), np.bool_), "kv_slots": empty}
    return {"next_tree_width": int(width), "stop_reason": stop,
            "tokens": r.frontier.tokens.copy(),
            "parent_indices": record.parent_indices_in_layer[:, :width].copy(),
            "node_ids": r.frontier.node_ids.copy(),
            "positions": np.repeat(r.seq_lens[:, None] + record.depth, width, axis=1),
            "tree_mask": r.mask.copy(), "kv_slots": kv.copy()}


def _int_array(name, value, shape):
    """``value`` checked to be an integer numpy array of ``shape`` (``None``: any 1-D), as
    int64 (host error)."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or (
            value.shape != shape if shape is not None else value.ndim != 1):
        got = (value.shape, value.dtype) if isinstance(value, np.ndarray) else type(value)
        raise ValueError(f"`{name}` must be an integer array of shape "
                         f"{shape if shape is not None else '[B]'}, not {got}")
    return value.astype(np.int64)


def _int_array2(name, value, rows):
    """``value`` checked to be an integer numpy array ``[rows, n]`` (any ``n``), as int64."""
    if not isinstance(value, np.ndarray) or value.ndim != 2 or value.shape[0] != rows:
        got = (value.shape, value.dtype) if isinstance(value, np.ndarray) else type(value)
        raise ValueError(f"`{name}` must be an integer array of shape [B = {rows}, n], "
                         f"not {got}")
    return _int_array(name, value, value.shape)


def loadable_tree_error(index, next_token, next_sibling) -> str | None:
    """Why ``load_tree`` refuses the trees ``index``, ``next_token``, ``next_sibling``
    (i64 [B, n]), or None when it accepts them: its own flat positions as ``retrive_index``,
    links -1 or in ``1 .. n - 1``, no node the target of two links (so that a walk from the
    root visits a node at most once)."""
    b, n = index.shape
    if (index != np.arange(b * n).reshape(b, n)).any():
        return "`retrive_index[b, i]` must be b*n + i"
    for name, links in (("retrive_next_token", next_token),
                        ("retrive_next_sibling", next_sibling)):
        if ((links != -1) & ((links < 1) | (links >= n))).any():
            return f"`{name}` links must be -1 or a node 1 .. n - 1 (node 0 is the root)"
    for row in range(b):
        targets = np.concatenate([next_token[row], next_sibling[row]])
        targets = targets[targets != -1]
        if len(np.unique(targets)) != len(targets):
            return f"request {row}: a node is the target of two links (not a tree)"
    return None


def _check_range(name, values, limit):
    """A ``BAD_ARGUMENT`` error unless every value lies in ``0 .. limit - 1``."""
    with _refused_as(Status.BAD_ARGUMENT):
        check_index_range(name, values, 0, limit, str(limit))
