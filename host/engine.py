"""``host.Engine``: the host API over the persistent engine's commands (docs/host.md).

A round is ``draft_round`` (``begin_round``, one ``draft_depth`` per depth with the draft
model's top-K, ``read_state`` of every slot for the tree), ``build_verify`` and ``verify``;
``round`` runs the three. Every argument is checked here (``ValueError`` naming it) before
a command reaches the backend; a command the backend still refuses raises
:class:`EngineError`. A call that fails changes nothing: not the slots, not ``req_to_token``,
not the coin generator, not the KV slot allocator (docs/host.md, "Bad input").
"""

from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from golden.draft_round import (
    DepthRecord,
    DraftRoundConfig,
    DraftRoundResult,
    DraftSample,
    Frontier,
    forced_width,
)
from golden.engine import EngineConfig, SlotState, loadable_tree_error
from golden.tree_mask import TreeMaskMode, verify_set_size
from golden.update_state import clamp_verify_num

from .backend import Backend, CommandResult, make_backend
from .checks import (
    INT32_MAX,
    check_choice,
    check_float_array,
    check_index_array,
    check_integer,
    check_probability,
    check_token_array,
)
from .kv import KVSlots
from .results import CommandRecord, RoundResult, VerifyResult, VerifyTree

__all__ = ["Engine", "EngineError", "engine_config"]

# Initial values of the tree rows past ``cumu_count`` (golden.draft_round's buffers).
_TREE_FILL = {"cumu_tokens": -1, "cumu_scores": 0.0, "cumu_deltas": -1, "prev_indexs": -1,
              "next_indexs": -1, "side_indexs": -1}
_SCORE_ROWS = ("sort_scores", "work_scores")
_MAX_SEED = (1 << 32) - 1
# The most req_to_token entries: a quarter of the card's 32-bit address space as int32 words.
MAX_TABLE_ENTRIES = 1 << 28


class EngineError(RuntimeError):
    """A command the engine refused (or sent out of order): ``command``, ``status`` (the
    ``golden.engine.Status`` name) and the engine's ``message``."""

    def __init__(self, command: str, status: str, message: str):
        super().__init__(f"{command}: {status}: {message}")
        self.command, self.status, self.message = command, status, message


def engine_config(config: DraftRoundConfig, vocab_size: int) -> EngineConfig:
    """The engine build for rounds of ``config``: its K, width cap, ``max_verify_num``,
    ``max_node_count``, ``max_input_size``, sort width and width-policy cost; ``depths`` depth
    labels at most; ``batch_size`` slots; ``vocab_size`` V."""
    return EngineConfig(
        node_top_k=config.node_top_k, max_tree_width=config.max_tree_width,
        max_depths=config.depths, max_verify_num=config.max_verify_num,
        max_node_count=config.max_node_count, max_input_size=config.max_input_size,
        vocab_size=vocab_size, max_batch=config.batch_size, sort_width=config.sort_width,
        cost_per_node=config.cost_per_node)


@dataclass
class _Round:
    """The host's view of the round in flight."""

    slots: np.ndarray
    seq_lens: np.ndarray
    config: DraftRoundConfig
    phase: str = "drafted"  # then "built", then "verified"
    depths_run: int = 0
    n: int = 0  # the verify tree's size, once built or loaded
    cumu_count: int = 1
    tree: VerifyTree | None = None
    commands: list = field(default_factory=list)


class Engine:
    """The host API of the persistent engine.

    Parameters
    ----------
    config : golden.DraftRoundConfig
        The rounds' shape: ``node_top_k``, ``max_tree_width``, ``depths``, ``verify_num``,
        ``max_verify_num``, ``max_node_count``, ``max_input_size``, ``hidden_size`` (the
        draft model's hidden states, which stay on the host), ``cost_per_node``,
        ``sort_width``. ``batch_size`` is the number of request slots (the engine's
        ``max_batch``); a round holds ``1 .. batch_size`` requests. The engine is built with
        :func:`engine_config`.
    vocab_size : int
        V, the target vocabulary (token ids, logits rows).
    backend : "golden", "rtl" or a :class:`host.Backend`
        What runs the commands: the golden model, or the Verilated hardware engine
        (``host.rtl.RtlBackend``, built once per parameter set).
    req_to_token : ndarray i64 [P, C] or None
        The card memory's request-to-KV-slot table (``P >= batch_size`` rows; request slot
        ``s`` uses row ``s``). Default: ``batch_size`` rows of ``context_len`` entries.
    hot_token_id : ndarray i64 [V_hot] or None
        The draft-to-target vocabulary map (K1's ``hot_token_id``), when the draft model has
        its own vocabulary: the sampler's tokens are then draft ids in ``0 .. V_hot - 1``.
    context_len : int
        C of the default ``req_to_token``.
    seed : int or None
        Seed of the coins ``verify`` draws when the caller gives none.
    kv_slots : host.KVSlots or None
        The KV slot allocator used when a command's KV slots are not given.
    """

    def __init__(self, config: DraftRoundConfig, *, vocab_size: int, backend="golden",
                 req_to_token=None, hot_token_id=None, context_len: int = 4096, seed=None,
                 kv_slots: KVSlots | None = None):
        if not isinstance(config, DraftRoundConfig):
            raise ValueError(f"`config` must be a golden.DraftRoundConfig, not "
                             f"{type(config).__name__}")
        self.config = config
        self.vocab_size = check_integer("vocab_size", vocab_size, config.node_top_k, INT32_MAX)
        self.room = max(config.max_input_size + 1, config.max_verify_num)
        if seed is not None:
            check_integer("seed", seed, 0)
        if kv_slots is not None and not isinstance(kv_slots, KVSlots):
            raise ValueError(f"`kv_slots` must be a host.KVSlots or None, not "
                             f"{type(kv_slots).__name__}")
        if req_to_token is None:
            context_len = check_integer("context_len", context_len, self.room + 1,
                                        MAX_TABLE_ENTRIES // config.batch_size)
            req_to_token = np.full((config.batch_size, context_len), -1, np.int64)
        check_index_array("req_to_token", req_to_token, (None, None), lo=-INT32_MAX - 1)
        if req_to_token.shape[0] < config.batch_size or req_to_token.shape[1] <= self.room \
                or req_to_token.size > MAX_TABLE_ENTRIES:
            raise ValueError(f"`req_to_token` must have at least {config.batch_size} rows "
                             f"(`batch_size`), more than {self.room} columns and at most "
                             f"{MAX_TABLE_ENTRIES} entries, not {req_to_token.shape}")
        if hot_token_id is not None:
            check_token_array("hot_token_id", hot_token_id, (None,), self.vocab_size)
            if hot_token_id.size == 0:
                raise ValueError("`hot_token_id` must map at least one draft token")
            hot_token_id = hot_token_id.copy()
        self.hot_token_id = hot_token_id
        self.engine_config = engine_config(config, self.vocab_size)
        self.backend: Backend = make_backend(backend, self.engine_config, req_to_token,
                                             hot_token_id=hot_token_id)
        self.seq_lens = np.zeros(config.batch_size, np.int64)
        self.rng = np.random.default_rng(seed)
        self.kv_slots = kv_slots if kv_slots is not None else KVSlots()
        self.commands: list[CommandRecord] = []
        self._round: _Round | None = None

    # --- properties ---------------------------------------------------------------------------

    @property
    def req_to_token(self) -> np.ndarray:
        """The card memory's ``req_to_token`` as the last command left it."""
        return self.backend.req_to_token

    @property
    def context_len(self) -> int:
        """C, the length of a ``req_to_token`` row."""
        return self.req_to_token.shape[1]

    @property
    def draft_vocab_size(self) -> int:
        """The sampler's vocabulary: ``len(hot_token_id)``, else V."""
        return self.vocab_size if self.hot_token_id is None else len(self.hot_token_id)

    # --- the draft round ------------------------------------------------------------------------

    def draft_round(self, sampler, root_tokens, *, root_hidden_states=None, hot_token_id=None,
                    widths=None, slots=None, seq_lens=None,
                    draft_cache_locs=None) -> DraftRoundResult:
        """One draft round (docs/kernels.md §4) through the engine's commands, with the
        semantics and result of ``golden.draft_round(config, sampler, root_tokens, ...)``
        (``config`` with ``batch_size = len(root_tokens)``).

        ``sampler(depth, frontier) -> golden.DraftSample`` gives the top-K children of every
        frontier node; ``root_tokens`` i64 [B] (``1 <= B <= batch_size``);
        ``root_hidden_states`` f32 [B, 1, H] or None (zeros); ``hot_token_id`` None or the
        Engine's map (the map is part of the engine's configuration); ``widths`` a sequence
        of ints in ``0 .. max_tree_width``, ``widths[i]`` the width of depth label ``i + 2``
        (the round stops where it ends). Request ``b`` runs in slot ``slots[b]`` (default
        ``b``) at sequence length ``seq_lens[b]`` (default: what the slot's last ``verify``
        left, 0 at first); ``draft_cache_locs`` i64 [B, max_input_size + 1] are its draft
        inputs' KV slots (default: from ``kv_slots``).

        The result's tree arrays come from ``read_state``; its ``depths`` records hold what
        crosses the engine's boundary (``depth``, ``tree_width``, ``cumu_count``,
        ``input_count``, ``frontier``, ``sample``, ``input_tree_mask``,
        ``next_tree_width``); K1/K2/K3's internal arrays stay on chip and are ``None``.
        """
        c = self.config
        if not callable(sampler):
            raise ValueError(f"`sampler` must be callable (depth, frontier) -> DraftSample, "
                             f"not {type(sampler).__name__}")
        check_token_array("root_tokens", root_tokens, (None,), self.vocab_size)
        b = root_tokens.shape[0]
        if not 1 <= b <= c.batch_size:
            raise ValueError(f"`root_tokens` must hold 1 .. {c.batch_size} (`batch_size`) "
                             f"requests, not {b}")
        slots = self._check_slots(slots, b)
        seq_lens = self._check_seq_lens(seq_lens, slots)
        hidden = self._check_root_hidden(root_hidden_states, b)
        self._check_hot_token_id(hot_token_id)
        widths = self._check_widths(widths)
        if draft_cache_locs is not None:
            check_index_array("draft_cache_locs", draft_cache_locs, (b, c.max_input_size + 1))
        with self._all_or_nothing(engine_state=True):
            if draft_cache_locs is None:
                draft_cache_locs = self.kv_slots.take((b, c.max_input_size + 1))
            return self._draft(sampler, root_tokens, hidden, widths, slots, seq_lens,
                               draft_cache_locs)

    def _draft(self, sampler, root_tokens, hidden, widths, slots, seq_lens,
               draft_cache_locs) -> DraftRoundResult:
        """``draft_round``'s commands, on checked arguments."""
        c, k, b = self.config, self.config.node_top_k, len(slots)
        round_ = _Round(slots=slots.copy(), seq_lens=seq_lens.copy(),
                        config=replace(c, batch_size=b), phase="drafting")
        self._round = round_
        self._send("begin_round", slots, root_tokens, seq_lens, slots, draft_cache_locs,
                   verify_num=c.verify_num, depths=c.depths)
        frontier = Frontier(depth=1, node_ids=np.zeros((b, 1), np.int64),
                            tokens=root_tokens.reshape(b, 1).copy(),
                            scores=np.ones((b, 1), np.float32), hidden_states=hidden.copy())
        mask = np.zeros((b, 1, 0), np.bool_)
        mask_nodes, records, input_count = np.zeros((b, 0), np.int64), [], 1
        while True:
            w = frontier.node_ids.shape[1]
            sample = self._check_sample(sampler(frontier.depth, frontier), b, w)
            out = self._send("draft_depth", sample.probas, sample.tokens,
                             width=forced_width(widths, frontier.depth))
            start = round_.cumu_count
            round_.cumu_count += w * k
            round_.depths_run += 1
            records.append(_depth_record(frontier, sample, mask, start, input_count,
                                         out["next_tree_width"]))
            if out["stop_reason"]:
                break
            frontier = _next_frontier(frontier, sample, out, start)
            mask = out["tree_mask"].copy()
            mask_nodes = np.concatenate([mask_nodes, frontier.node_ids], axis=1)
            input_count += out["next_tree_width"]
        round_.phase = "drafted"
        tree = self._read_trees(slots)
        round_.cumu_count = tree["cumu_count"]
        return DraftRoundResult(config=round_.config, **tree, mask_nodes=mask_nodes,
                                depths=records, stop_reason=out["stop_reason"])

    # --- build_verify and verify ------------------------------------------------------------

    def verify_size(self) -> int:
        """``n`` of the drafted round's verify tree (``min(clamp(verify_num), cumu_count)``;
        a built or loaded tree's own); 0 with no drafted round."""
        r = self._round
        if r is not None and r.phase == "built":
            return r.n
        if r is None or r.phase != "drafted":
            return 0
        return verify_set_size(clamp_verify_num(self.config.verify_num,
                                                self.config.max_verify_num), r.cumu_count)

    def build_verify(self, tree_mask_mode=TreeMaskMode.QLEN_ONLY_BITPACKING,
                     verify_cache_locs=None) -> VerifyTree:
        """The verify tree of the drafted round (docs/kernels.md §6) and the verify forward's
        metadata (§11 P1) in SGLang's formats: ``tree_mask_mode`` 0 (FULL), 1 (QLEN_ONLY) or 2
        (QLEN_ONLY_BITPACKING, default); ``verify_cache_locs`` i64 [B*n], the verify forward's
        KV slots (default: from ``kv_slots``), written to ``req_to_token`` at ``seq_lens[b]
        .. seq_lens[b] + n - 1``."""
        r = self._require_phase("build_verify", "drafted")
        mode = int(check_choice("tree_mask_mode", tree_mask_mode, tuple(TreeMaskMode)))
        b, n = len(r.slots), self.verify_size()
        if verify_cache_locs is not None:
            check_index_array("verify_cache_locs", verify_cache_locs, (b * n,))
        with self._all_or_nothing():
            if verify_cache_locs is None:
                verify_cache_locs = self.kv_slots.take((b * n,))
            out = self._send("build_verify", mode, verify_cache_locs)
        r.tree = VerifyTree(
            n=n, tree_mask_mode=mode, cache_locs=verify_cache_locs.copy(),
            **{name: out[name] for name in (
                "draft_tokens", "positions", "retrive_index", "retrive_next_token",
                "retrive_next_sibling", "tree_mask", "qo_indptr", "kv_indptr", "mask_indptr",
                "kv_indices")})
        r.phase, r.n = "built", n
        return r.tree

    def load_tree(self, draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
                  *, num_speculative_tokens, verify_cache_locs=None) -> int:
        """A verify tree the caller built (SGLang's ``build_tree_kernel_efficient``, ...) in
        place of the drafted round's, for :meth:`verify` (docs/engine.md, "Loading a
        caller's tree"): ``retrive_index``, ``retrive_next_token``, ``retrive_next_sibling``
        i64 [B, n] (``1 <= n <= max_verify_num``; ``retrive_index[b, i] == b*n + i``, links
        -1 or a node ``1 .. n - 1``, no node the target of two links), ``draft_tokens`` i64
        [B*n] (the candidates, in ``0 .. V - 1``), ``num_speculative_tokens`` ``S`` (``2 ..
        depths + 1``), ``verify_cache_locs`` i64 [B*n] (the verify forward's KV slots, K7's
        ``out_cache_loc``; default: from ``kv_slots``). ``req_to_token`` is not written: the
        caller placed the verify forward's slots. Returns ``n``."""
        r = self._require_phase("load_tree", "drafted")
        b, c = len(r.slots), self.config
        check_index_array("retrive_index", retrive_index, (b, None), hi=None)
        n = retrive_index.shape[1]
        if not 1 <= n <= c.max_verify_num:
            raise ValueError(f"the tree's n (`retrive_index`'s columns) must be between 1 and "
                             f"`max_verify_num` ({c.max_verify_num}), not {n}")
        for name, links in (("retrive_next_token", retrive_next_token),
                            ("retrive_next_sibling", retrive_next_sibling)):
            check_index_array(name, links, (b, n), lo=-1, hi=n)
        check_token_array("draft_tokens", draft_tokens, (b * n,), self.vocab_size)
        steps = check_integer("num_speculative_tokens", num_speculative_tokens, 2,
                              c.depths + 1)
        error = loadable_tree_error(retrive_index, retrive_next_token, retrive_next_sibling)
        if error:
            raise ValueError(error)
        if verify_cache_locs is not None:
            check_index_array("verify_cache_locs", verify_cache_locs, (b * n,))
        with self._all_or_nothing():
            if verify_cache_locs is None:
                verify_cache_locs = self.kv_slots.take((b * n,))
            self._send("load_tree", draft_tokens, retrive_index, retrive_next_token,
                       retrive_next_sibling, verify_cache_locs, num_speculative_tokens=steps)
        r.phase, r.n, r.tree = "built", n, None
        return n

    def verify(self, target_logits, temperatures, *, max_seq_lens=None, eos_token_id=-1,
               uniform_samples=None, uniform_samples_for_final_sampling=None, seeds=None,
               threshold_single=1.0, threshold_acc=1.0, top_k=None,
               top_p=None) -> VerifyResult:
        """The fused verify from logits (docs/kernels.md §10) on the built tree, then the
        commit (§9).

        ``target_logits`` f32 [B, n, V] (row ``i`` of request ``b``: the target model's
        logits after verify position ``i``; NaN is treated as ``-inf`` and flagged, §10);
        ``temperatures`` f32 [B], finite, >= 0 (below 1e-6: greedy); ``max_seq_lens`` i64 [B]
        (default: the ``req_to_token`` row length); ``eos_token_id`` (-1: none); the coins,
        either ``uniform_samples`` f32 [B, n] with ``uniform_samples_for_final_sampling`` f32
        [B] (in [0, 1]), or LFSR ``seeds`` i64 [B] (0 .. 2**32 - 1), or neither (drawn from
        the Engine's ``seed``); ``threshold_single``, ``threshold_acc`` in [0, 1] (1.0:
        lossless); ``top_k`` i32 [B] (<= 0 or >= V: off) and ``top_p`` f32 [B] in [0, 1]
        (1.0: off), or None. The slots' sequence lengths advance by ``accept_length``.
        """
        r = self._require_phase("verify", "built")
        b, n, v = len(r.slots), r.n, self.vocab_size
        check_float_array("target_logits", target_logits, (b, n, v), finite=False)
        check_float_array("temperatures", temperatures, (b,), lo=0.0)
        if max_seq_lens is None:
            max_seq_lens = np.full(b, self.context_len, np.int64)
        check_index_array("max_seq_lens", max_seq_lens, (b,), lo=1, hi=self.context_len + 1)
        if (max_seq_lens <= r.seq_lens).any():
            raise ValueError("`max_seq_lens` must exceed each request's sequence length "
                             f"({r.seq_lens.tolist()}), not {max_seq_lens.tolist()}")
        settings = dict(
            eos_token_id=check_integer("eos_token_id", eos_token_id, -1, v - 1),
            threshold_single=check_probability("threshold_single", threshold_single),
            threshold_acc=check_probability("threshold_acc", threshold_acc))
        if top_k is not None:
            check_index_array("top_k", top_k, (b,), lo=-INT32_MAX - 1, dtype=np.int32)
        if top_p is not None:
            check_float_array("top_p", top_p, (b,), lo=0.0, hi=1.0)
        coins = self._check_coins(uniform_samples, uniform_samples_for_final_sampling, seeds,
                                  b, n)
        with self._all_or_nothing():
            if not coins:  # drawn only now, every argument checked
                coins = {"uniform_samples": self.rng.random((b, n), dtype=np.float32),
                         "uniform_samples_for_final_sampling": self.rng.random(
                             b, dtype=np.float32)}
            out = self._send("verify", target_logits, temperatures, max_seq_lens, top_k=top_k,
                             top_p=top_p, **settings, **coins)
        self.seq_lens[r.slots] = out["seq_lens"]
        r.phase = "verified"
        return VerifyResult(**{name: out[name] for name in (
            "predicts", "accept_index", "accept_token_num", "accept_length", "verified_id",
            "next_root", "evict_mask", "finished", "seq_lens", "active_slots",
            "active_inverse", "nan_flags")}, active_count=int(out["active_count"][0]),
            rows_read=int(out["rows_read"]))

    def round(self, sampler, root_tokens, target, temperatures, *,
              tree_mask_mode=TreeMaskMode.QLEN_ONLY_BITPACKING, root_hidden_states=None,
              widths=None, slots=None, **verify_settings) -> RoundResult:
        """``draft_round``, ``build_verify`` and ``verify`` in one call, all or nothing: if
        any step fails (a bad verify setting included) the engine is as before the call.
        ``target(tree) -> f32 [B, n, V]`` gives the target model's logits for the verify tree
        (a :class:`host.VerifyTree`); ``verify_settings`` go to ``verify``."""
        if not callable(target):
            raise ValueError(f"`target` must be callable (VerifyTree) -> logits, not "
                             f"{type(target).__name__}")
        check_choice("tree_mask_mode", tree_mask_mode, tuple(TreeMaskMode))
        with self._all_or_nothing(engine_state=True):
            draft = self.draft_round(sampler, root_tokens,
                                     root_hidden_states=root_hidden_states, widths=widths,
                                     slots=slots)
            tree = self.build_verify(tree_mask_mode)
            result = self.verify(target(tree), temperatures, **verify_settings)
        return RoundResult(draft=draft, tree=tree, verify=result,
                           commands=list(self._round.commands))

    def read_state(self, slot) -> SlotState:
        """Slot ``slot``'s state on the engine (``golden.engine.SlotState``)."""
        slot = check_integer("slot", slot, 0, self.config.batch_size - 1)
        return self._send("read_state", slot)["state"]

    # --- helpers ------------------------------------------------------------------------------

    def _send(self, command, *args, **kwargs) -> dict:
        """Run ``command`` on the backend and record it; its outputs, or ``EngineError``."""
        result: CommandResult = getattr(self.backend, command)(*args, **kwargs)
        done = result.completion
        record = CommandRecord(command, done.status.name, result.cycles, result.bytes)
        self.commands.append(record)
        if self._round is not None and command != "read_state":
            self._round.commands.append(record)
        if not done.ok:
            raise EngineError(command, done.status.name, done.message)
        return done.outputs

    @contextmanager
    def _all_or_nothing(self, *, engine_state=False):
        """Undo whatever the block changed if it raises (anything, the sampler's own errors
        and ``KeyboardInterrupt`` included): the coin generator, the KV slot allocator, the
        host's round and slot lengths and, with ``engine_state``, the engine's slots and
        ``req_to_token`` (``Backend.snapshot``/``restore``)."""
        rng_state, kv_mark = self.rng.bit_generator.state, self.kv_slots.mark()
        round_, phase, seq_lens = self._round, getattr(self._round, "phase", None), \
            self.seq_lens.copy()
        snapshot = self.backend.snapshot() if engine_state else None
        try:
            yield
        except BaseException:
            if engine_state:
                self.backend.restore(snapshot)
            self.rng.bit_generator.state = rng_state
            self.kv_slots.rewind(kv_mark)
            self._round, self.seq_lens[:] = round_, seq_lens
            if round_ is not None:
                round_.phase = phase
            raise

    def _require_phase(self, command, phase) -> _Round:
        r = self._round
        if r is None or r.phase != phase:
            before = {"drafted": "a drafted round (draft_round)",
                      "built": "a built verify tree (build_verify or load_tree)"}[phase]
            raise EngineError(command, "BAD_PHASE", f"{command} needs {before}")
        return r

    def _check_slots(self, slots, b) -> np.ndarray:
        if slots is None:
            return np.arange(b, dtype=np.int64)
        check_index_array("slots", slots, (b,), hi=self.config.batch_size)
        if len(np.unique(slots)) != b:
            raise ValueError("`slots` must not repeat a slot")
        return slots

    def _check_seq_lens(self, seq_lens, slots) -> np.ndarray:
        if seq_lens is None:
            seq_lens = self.seq_lens[slots]
        else:
            check_index_array("seq_lens", seq_lens, slots.shape)
        if (seq_lens + self.room > self.context_len).any():
            raise ValueError(f"`seq_lens` must leave room for a round ({self.room} entries) "
                             f"in the `req_to_token` rows of {self.context_len}, not "
                             f"{seq_lens.tolist()} (give a longer context)")
        return seq_lens

    def _check_root_hidden(self, hidden, b) -> np.ndarray:
        h = self.config.hidden_size
        if hidden is None:
            return np.zeros((b, 1, h), np.float32)
        return check_float_array("root_hidden_states", hidden, (b, 1, h), finite=False)

    def _check_hot_token_id(self, hot_token_id):
        if hot_token_id is None:
            return
        if self.hot_token_id is None or not isinstance(hot_token_id, np.ndarray) \
                or not np.array_equal(hot_token_id, self.hot_token_id):
            raise ValueError("`hot_token_id` must be None or the map the Engine was built "
                             "with (host.Engine(..., hot_token_id=...)): it is part of the "
                             "engine's configuration")

    def _check_widths(self, widths) -> list[int] | None:
        if widths is None:
            return None
        if isinstance(widths, str | bytes) or not hasattr(widths, "__len__"):
            raise ValueError(f"`widths` must be a sequence of integers, not {widths!r}")
        return [check_integer(f"widths[{i}]", w, 0, self.config.max_tree_width)
                for i, w in enumerate(widths)]

    def _check_sample(self, sample, b, w) -> DraftSample:
        """The sampler's answer for a frontier of ``w`` nodes."""
        if not isinstance(sample, DraftSample):
            raise ValueError(f"the sampler must return a DraftSample, not "
                             f"{type(sample).__name__}")
        n = w * self.config.node_top_k
        check_float_array("DraftSample.probas", sample.probas, (b, n), lo=0.0)
        check_token_array("DraftSample.tokens", sample.tokens, (b, n), self.draft_vocab_size,
                          vocabulary="the draft vocabulary" if self.hot_token_id is not None
                          else "the vocabulary")
        if sample.hidden_states is not None:
            check_float_array("DraftSample.hidden_states", sample.hidden_states,
                              (b, w, self.config.hidden_size), finite=False)
        return sample

    def _check_coins(self, uniform, final, seeds, b, n) -> dict:
        """The coin arguments of ``verify`` checked; ``{}`` when the Engine draws them."""
        if seeds is not None:
            if uniform is not None or final is not None:
                raise ValueError("give either `seeds` or `uniform_samples` (with "
                                 "`uniform_samples_for_final_sampling`), not both")
            return {"seeds": check_index_array("seeds", seeds, (b,), hi=_MAX_SEED + 1)}
        if uniform is None and final is None:
            return {}  # ``verify`` draws them once every argument has passed
        if uniform is None or final is None:
            missing = "uniform_samples" if uniform is None else \
                "uniform_samples_for_final_sampling"
            raise ValueError(f"`{missing}` must be given with the other coin array")
        return {"uniform_samples": check_float_array("uniform_samples", uniform, (b, n),
                                                     lo=0.0, hi=1.0),
                "uniform_samples_for_final_sampling": check_float_array(
                    "uniform_samples_for_final_sampling", final, (b,), lo=0.0, hi=1.0)}

    def _read_trees(self, slots) -> dict:
        """The round's tree arrays from ``read_state`` of every slot, rows past
        ``cumu_count`` filled as ``golden.draft_round`` leaves them."""
        states = [self._send("read_state", int(slot))["state"] for slot in slots]
        count = states[0].cumu_count
        maxn = self.config.max_node_count
        tree = {"cumu_count": count}
        for name, fill in _TREE_FILL.items():
            dtype = np.float32 if isinstance(fill, float) else np.int64
            rows = np.full((len(states), maxn), fill, dtype)
            for row, state in zip(rows, states, strict=True):
                row[:count] = state.tree[name][:count]
            tree[name] = rows
        for name in _SCORE_ROWS:
            tree[name] = np.stack([state.tree[name] for state in states]).astype(np.float32)
        return tree


def _depth_record(frontier, sample, mask, start, input_count, next_width) -> DepthRecord:
    """A depth's record as the host sees it (K1/K2/K3's internal arrays ``None``)."""
    internal = dict.fromkeys((
        "curr_layer_scores", "sort_layer_scores", "sort_layer_indices", "topk_tokens",
        "cache_topk_indices", "parent_indices_in_layer", "output_hidden_states",
        "output_scores", "output_tokens", "output_tree_mask", "work_deltas"))
    return DepthRecord(depth=frontier.depth, tree_width=frontier.node_ids.shape[1],
                       cumu_count=start, input_count=input_count, frontier=frontier,
                       sample=sample, input_tree_mask=mask, next_tree_width=int(next_width),
                       **internal)


def _next_frontier(frontier, sample, out, start) -> Frontier:
    """The next depth's frontier from ``draft_depth``'s outputs: the engine gives the nodes'
    ids, tokens and parent slots; the host keeps the path scores (K1's one float32 multiply
    ``probas[t] * score[parent]``, ``t = node id - start``) and gathers the draft model's
    hidden states of the parents."""
    node_ids, parents = out["node_ids"], out["parent_indices"]
    probas = np.take_along_axis(sample.probas, node_ids - start, axis=1)
    scores = probas * np.take_along_axis(frontier.scores, parents, axis=1)
    b, w = frontier.node_ids.shape
    hidden = sample.hidden_states
    if hidden is None:
        hidden = np.zeros((b, w, frontier.hidden_states.shape[2]), np.float32)
    return Frontier(depth=frontier.depth + 1, node_ids=node_ids.copy(),
                    tokens=out["tokens"].copy(), scores=scores.astype(np.float32),
                    hidden_states=np.take_along_axis(hidden, parents[:, :, None], axis=1))
