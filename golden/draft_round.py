"""Draft-round driver (docs/kernels.md §4): K1 -> K2 -> K3 -> width policy, depth by depth.

The driver owns the state that lives across the depths of one round (the cumulative tree of
§0, ``sort_scores``, ``work_scores``, the draft-model tree mask) and asks a *sampler* — the
draft model, or :func:`synthetic_sampler` in tests — for the top-K children of every frontier
node.

Conventions fixed here (the spec is silent on them):

* Depth labels: the root has ``cumu_deltas = 0``; the layer drafted under the root is depth
  label 1, and the K2 ``curr_depth`` argument is the label of the nodes it appends, so every
  node's label is its parent's plus one (the capture writes ``curr_depth = 3`` verbatim).
* Depth label 1: K1 runs with ``W = 1``, ``last_layer_scores = [1.0]`` (so ``curr = p``
  exactly), K2 with ``topk_indexs = [0]``, ``cumu_count = 1``, ``curr_depth = 1``. K2 would
  store ``p * 0.9999f``; the CUDA flow instead writes this first layer's scores from the verify
  top-K directly on the host, so the driver overwrites those ``K`` slots of ``cumu_scores``
  with the raw probabilities. Nothing else K2 writes depends on the 0.9999 factor (outputs,
  ``sort_scores`` and ``work_scores`` use the unscaled sorted scores), so this is the only
  difference. Later depths store ``path_product * 0.9999f`` via K2.
* Tree mask: the draft model's input in this round is the root followed by the frontier tokens
  of each depth >= 2 in slot order; ``input_count`` counts them (1 at depth 1). Mask column
  ``c`` is input token ``c + 1`` (the root is not a column; ``mask_nodes`` maps columns to node
  ids). ``input_tree_mask[b, w]`` is frontier node w's row: true at its non-root ancestors and
  itself. K2 copies the parents' rows into ``output_tree_mask`` (columns ``< input_count-1``);
  the host then builds the next depth's ``[B, W', input_count'-1]`` mask from the first ``W'``
  output rows, clears the new columns and sets the self bit of slot w at column
  ``input_count - 1 + w`` (``input_count' = input_count + W'``).
* Next width: ``W' = min(width_policy(...), max_tree_width)``; K3 receives the ``cumu_count``
  K2 received (before the append).
* Stop: after a depth, the round ends when (checked in this order) ``W' == 0``
  ("width_zero"), ``depths`` depths are done ("depths"), ``cumu_count + W'*K > MAXN``
  ("node_budget": the next depth would drop appends, so it is not run), or
  ``input_count + W' > max_input_size + 1`` ("input_budget": the self bits would not fit).
* Initial buffers: unused ``cumu_tokens``/``cumu_deltas``/link slots hold -1, unused scores
  0.0; ``sort_scores``/``work_scores`` are 0.0 apart from the root's 1.001f.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ._abi import check_array, check_int
from .score import draft_tree_layer_score_index_gen_op
from .update_state import MAX_NODE_TOP_K, update_cumu_draft_state
from .work_deltas import calculate_work_deltas, width_policy

__all__ = [
    "ROOT_SCORE",
    "DepthRecord",
    "DraftRoundConfig",
    "DraftRoundResult",
    "DraftSample",
    "Frontier",
    "draft_round",
    "synthetic_sampler",
]

# 1.001f, bits 0x3F8020C5: above every probability, so the root leads every verify set.
ROOT_SCORE = np.array([0x3F8020C5], dtype=np.uint32).view(np.float32)[0]


@dataclass(frozen=True)
class DraftRoundConfig:
    """Static parameters of one draft round.

    Fields: ``batch_size`` B >= 1; ``node_top_k`` K in 1..16; ``max_tree_width`` cap on W
    (1..K, ``K * max_tree_width <= sort_width``); ``depths`` T >= 1 depth labels at most;
    ``verify_num`` verify-set size incl. root (clamped to 1..MAXV by K2/K3);
    ``max_verify_num`` MAXV >= 1; ``max_node_count`` MAXN >= 1 + K; ``max_input_size`` MI
    >= 0; ``hidden_size`` H >= 0 (float32 hidden states); ``cost_per_node`` width-policy
    cost; ``sort_width`` 64 or 128.
    """

    batch_size: int
    node_top_k: int
    max_tree_width: int
    depths: int
    verify_num: int
    max_verify_num: int
    max_node_count: int
    max_input_size: int
    hidden_size: int = 0
    cost_per_node: float = 0.0
    sort_width: int = 64

    def __post_init__(self):
        """Validate the fields; raises ``ValueError`` naming the first bad one."""
        if self.sort_width not in (64, 128):
            raise ValueError(f"`sort_width` must be 64 or 128, not {self.sort_width}")
        check_int("batch_size", self.batch_size, 1)
        k = check_int("node_top_k", self.node_top_k, 1, MAX_NODE_TOP_K)
        w = check_int("max_tree_width", self.max_tree_width, 1, k, hi_name="`node_top_k`")
        if w * k > self.sort_width:
            raise ValueError(
                f"`node_top_k` * `max_tree_width` must be at most `sort_width` "
                f"({self.sort_width}), not {w * k}"
            )
        check_int("depths", self.depths, 1)
        if isinstance(self.verify_num, bool) or not isinstance(self.verify_num, int | np.integer):
            raise ValueError(f"`verify_num` must be an integer, not {self.verify_num!r}")
        check_int("max_verify_num", self.max_verify_num, 1)
        check_int("max_node_count", self.max_node_count, 1 + k, lo_name="1 + `node_top_k`")
        check_int("max_input_size", self.max_input_size, 0)
        check_int("hidden_size", self.hidden_size, 0)


@dataclass(frozen=True)
class Frontier:
    """The nodes expanded at one depth (what the sampler sees).

    Fields: ``depth`` label of the children being drafted; ``node_ids`` i64 [B, W];
    ``tokens`` i64 [B, W]; ``scores`` f32 [B, W] unscaled path products (K1's
    ``last_layer_scores``); ``hidden_states`` f32 [B, W, H] (the parents' hidden states
    gathered by the previous K1; the root's at depth 1).
    """

    depth: int
    node_ids: np.ndarray
    tokens: np.ndarray
    scores: np.ndarray
    hidden_states: np.ndarray


@dataclass(frozen=True)
class DraftSample:
    """The sampler's answer for one depth.

    Fields: ``probas`` f32 [B, W*K] and ``tokens`` i64 [B, W*K], candidate ``t = w*K + k`` is
    child k of frontier slot w; ``hidden_states`` f32 [B, W, H] (the draft model's output for
    each frontier node, K1's ``input_hidden_states``) or ``None`` for zeros.
    """

    probas: np.ndarray
    tokens: np.ndarray
    hidden_states: np.ndarray | None = None


Sampler = Callable[[int, Frontier], DraftSample]


@dataclass
class DepthRecord:
    """What happened at one depth label.

    Fields: ``depth``; ``tree_width`` W; ``cumu_count`` before the append; ``input_count``
    passed to K2; ``frontier``; ``sample``; ``input_tree_mask`` bool [B, W, input_count-1];
    K1 outputs ``curr_layer_scores``, ``sort_layer_scores``, ``sort_layer_indices`` [B, N],
    ``topk_tokens`` [B, N] (after the hot-token remap), ``cache_topk_indices``,
    ``parent_indices_in_layer`` [B, K], ``output_hidden_states`` [B, K, H]; K2 outputs
    ``output_scores``, ``output_tokens`` [B, K], ``output_tree_mask`` [B, K, MI+1] (copy);
    ``work_deltas`` [K+1] from K3; ``next_tree_width`` W' after the ``max_tree_width`` cap.
    """

    depth: int
    tree_width: int
    cumu_count: int
    input_count: int
    frontier: Frontier
    sample: DraftSample
    input_tree_mask: np.ndarray
    curr_layer_scores: np.ndarray
    sort_layer_scores: np.ndarray
    sort_layer_indices: np.ndarray
    topk_tokens: np.ndarray
    cache_topk_indices: np.ndarray
    parent_indices_in_layer: np.ndarray
    output_hidden_states: np.ndarray
    output_scores: np.ndarray
    output_tokens: np.ndarray
    output_tree_mask: np.ndarray
    work_deltas: np.ndarray
    next_tree_width: int


@dataclass
class DraftRoundResult:
    """Final state of a draft round.

    Fields: ``config``; cumulative tree ``cumu_tokens``, ``cumu_scores``, ``cumu_deltas``,
    ``prev_indexs``, ``next_indexs``, ``side_indexs`` [B, MAXN] (valid below ``cumu_count``);
    ``cumu_count``; ``sort_scores`` [B, MAXV]; ``work_scores`` [B, MAXV+K]; ``mask_nodes``
    i64 [B, input_count-1] node id of every tree-mask column; ``depths`` list of
    :class:`DepthRecord`; ``stop_reason`` one of "width_zero", "depths", "node_budget",
    "input_budget".
    """

    config: DraftRoundConfig
    cumu_tokens: np.ndarray
    cumu_scores: np.ndarray
    cumu_deltas: np.ndarray
    prev_indexs: np.ndarray
    next_indexs: np.ndarray
    side_indexs: np.ndarray
    cumu_count: int
    sort_scores: np.ndarray
    work_scores: np.ndarray
    mask_nodes: np.ndarray
    depths: list[DepthRecord] = field(default_factory=list)
    stop_reason: str = ""


@dataclass
class _State:
    """Buffers that persist across the depths of a round (the CUDA op arguments)."""

    cumu_tokens: np.ndarray
    cumu_scores: np.ndarray
    cumu_deltas: np.ndarray
    prev_indexs: np.ndarray
    next_indexs: np.ndarray
    side_indexs: np.ndarray
    output_scores: np.ndarray
    output_tokens: np.ndarray
    work_scores: np.ndarray
    sort_scores: np.ndarray
    output_tree_mask: np.ndarray
    cumu_count: int = 1

    def tree_args(self):
        """The eleven K2 output buffers in ABI order."""
        return (
            self.cumu_tokens, self.cumu_scores, self.cumu_deltas, self.prev_indexs,
            self.next_indexs, self.side_indexs, self.output_scores, self.output_tokens,
            self.work_scores, self.sort_scores, self.output_tree_mask,
        )


def _initial_state(config, root_tokens):
    """Buffers before depth 1: only the root (node 0) is valid (§4)."""
    b, k, maxn = config.batch_size, config.node_top_k, config.max_node_count
    maxv = config.max_verify_num
    state = _State(
        cumu_tokens=np.full((b, maxn), -1, np.int64),
        cumu_scores=np.zeros((b, maxn), np.float32),
        cumu_deltas=np.full((b, maxn), -1, np.int64),
        prev_indexs=np.full((b, maxn), -1, np.int64),
        next_indexs=np.full((b, maxn), -1, np.int64),
        side_indexs=np.full((b, maxn), -1, np.int64),
        output_scores=np.zeros((b, k), np.float32),
        output_tokens=np.full((b, k), -1, np.int64),
        work_scores=np.zeros((b, maxv + k), np.float32),
        sort_scores=np.zeros((b, maxv), np.float32),
        output_tree_mask=np.zeros((b, k, config.max_input_size + 1), np.bool_),
    )
    state.cumu_tokens[:, 0] = root_tokens
    state.cumu_scores[:, 0] = ROOT_SCORE
    state.cumu_deltas[:, 0] = 0
    state.sort_scores[:, 0] = ROOT_SCORE
    state.work_scores[:, 0] = ROOT_SCORE
    return state


def _draw(sampler, frontier, config):
    """Call the sampler and check its answer; return ``(sample, hidden [B, W, H])``."""
    b, w = frontier.node_ids.shape
    n = w * config.node_top_k
    sample = sampler(frontier.depth, frontier)
    if not isinstance(sample, DraftSample):
        raise ValueError(f"the sampler must return a DraftSample, not {type(sample).__name__}")
    check_array("DraftSample.probas", sample.probas, (b, n), np.float32)
    check_array("DraftSample.tokens", sample.tokens, (b, n), np.int64)
    hidden_shape = (b, w, config.hidden_size)
    if sample.hidden_states is None:
        return sample, np.zeros(hidden_shape, np.float32)
    check_array("DraftSample.hidden_states", sample.hidden_states, hidden_shape, np.float32)
    return sample, sample.hidden_states


def _run_depth(config, state, frontier, input_count, mask, sampler, hot_token_id, width=None):
    """Run K1, K2, K3 and the width policy for one depth; return its :class:`DepthRecord`.
    ``width`` (checked by the caller), when given, replaces the policy's next width."""
    b, k = config.batch_size, config.node_top_k
    w = frontier.node_ids.shape[1]
    n = w * k
    start = state.cumu_count
    sample, hidden = _draw(sampler, frontier, config)
    tokens = sample.tokens.copy()  # K1 remaps in place; keep the sampler's array intact
    k1 = {
        "curr_layer_scores": np.zeros((b, n), np.float32),
        "sort_layer_scores": np.zeros((b, n), np.float32),
        "sort_layer_indices": np.zeros((b, n), np.int64),
        "cache_topk_indices": np.zeros((b, k), np.int64),
        "parent_indices_in_layer": np.zeros((b, k), np.int64),
        "output_hidden_states": np.zeros((b, k, config.hidden_size), np.float32),
    }
    use_hot = hot_token_id is not None
    draft_tree_layer_score_index_gen_op(
        sample.probas, tokens, frontier.scores, k1["curr_layer_scores"],
        k1["sort_layer_scores"], k1["sort_layer_indices"], k1["cache_topk_indices"],
        k1["parent_indices_in_layer"], hidden, k1["output_hidden_states"],
        hot_token_id if use_hot else np.zeros(0, np.int64), b, k, w, start, use_hot,
        sort_width=config.sort_width,
    )
    update_cumu_draft_state(
        k1["curr_layer_scores"], tokens, k1["sort_layer_scores"], k1["sort_layer_indices"],
        k1["parent_indices_in_layer"], frontier.node_ids, mask, b, k, w, input_count, start,
        config.verify_num, frontier.depth, config.max_input_size, config.max_node_count,
        config.max_verify_num, *state.tree_args(), strict=True,
    )
    if frontier.depth == 1:
        state.cumu_scores[:, start : start + n] = sample.probas  # raw, see module docstring
    work_deltas = np.zeros(k + 1, np.float32)
    calculate_work_deltas(
        state.work_scores, work_deltas, b, k, start, config.verify_num, config.max_verify_num
    )
    policy = width_policy(work_deltas, k, b, config.cost_per_node)
    state.cumu_count = start + n
    return DepthRecord(
        depth=frontier.depth, tree_width=w, cumu_count=start, input_count=input_count,
        frontier=frontier, sample=sample, input_tree_mask=mask, topk_tokens=tokens,
        output_scores=state.output_scores.copy(), output_tokens=state.output_tokens.copy(),
        output_tree_mask=state.output_tree_mask.copy(), work_deltas=work_deltas,
        next_tree_width=min(policy, config.max_tree_width) if width is None else width, **k1,
    )


def _stop_reason(config, record, cumu_count, input_count):
    """Why the round ends after ``record`` ("" to go on); order as in the module docstring."""
    width = record.next_tree_width
    if width == 0:
        return "width_zero"
    if record.depth >= config.depths:
        return "depths"
    if cumu_count + width * config.node_top_k > config.max_node_count:
        return "node_budget"
    if input_count + width > config.max_input_size + 1:
        return "input_budget"
    return ""


def _next_frontier(record, input_count):
    """Frontier, tree mask and input count of the next depth (first W' outputs, §4)."""
    width = record.next_tree_width
    frontier = Frontier(
        depth=record.depth + 1,
        node_ids=record.cache_topk_indices[:, :width].copy(),
        tokens=record.output_tokens[:, :width].copy(),
        scores=record.output_scores[:, :width].copy(),
        hidden_states=record.output_hidden_states[:, :width].copy(),
    )
    old_cols = input_count - 1
    mask = np.zeros((record.output_tree_mask.shape[0], width, old_cols + width), np.bool_)
    mask[:, :, :old_cols] = record.output_tree_mask[:, :width, :old_cols]
    mask[:, np.arange(width), old_cols + np.arange(width)] = True
    return frontier, mask, input_count + width


def check_widths(widths, config) -> list[int] | None:
    """``widths`` as a list of ints, each ``0 .. max_tree_width`` (``None`` stays ``None``);
    raises ``ValueError`` naming ``widths``."""
    if widths is None:
        return None
    if isinstance(widths, str | bytes) or not hasattr(widths, "__len__"):
        raise ValueError(f"`widths` must be a sequence of integers, not {widths!r}")
    return [check_int(f"widths[{i}]", w, 0, config.max_tree_width, hi_name="`max_tree_width`")
            for i, w in enumerate(widths)]


def forced_width(widths, depth) -> int | None:
    """The width ``widths`` forces on the depth after depth label ``depth`` (``None``: the
    policy decides); the round stops (width 0) where the sequence ends."""
    if widths is None:
        return None
    return widths[depth - 1] if depth - 1 < len(widths) else 0


def draft_round(config, sampler, root_tokens, *, root_hidden_states=None, hot_token_id=None,
                widths=None):
    """Run one draft round (§4) and return a :class:`DraftRoundResult`.

    Parameters:
        config: :class:`DraftRoundConfig`.
        sampler: ``sampler(depth, frontier) -> DraftSample`` giving the top-K children of
            every frontier node (descending probabilities are expected of a real draft model
            but not required: K1 sorts).
        root_tokens: i64 [B] token of node 0 per request.
        root_hidden_states: optional f32 [B, 1, H], the frontier hidden state at depth 1
            (zeros if omitted).
        hot_token_id: optional i64 [V_hot]; when given, K1 remaps the sampled draft-vocab ids
            through it (``use_hot_token_id = True``) and the tree stores target-vocab ids.
        widths: optional sequence of ints in ``0 .. max_tree_width``: ``widths[i]`` replaces
            the width policy's choice for depth label ``i + 2`` (a serving system's static
            tree shape); the round stops where the sequence ends (as at a width of 0). The
            stop rules of the module docstring apply unchanged.

    Conventions (depth labels, the raw first layer, tree mask, stop rules) are in the module
    docstring. Raises ``ValueError`` for invalid arguments or a malformed sampler answer.
    """
    b, h = config.batch_size, config.hidden_size
    check_array("root_tokens", root_tokens, (b,), np.int64)
    if root_hidden_states is None:
        root_hidden_states = np.zeros((b, 1, h), np.float32)
    check_array("root_hidden_states", root_hidden_states, (b, 1, h), np.float32)
    widths = check_widths(widths, config)
    state = _initial_state(config, root_tokens)
    frontier = Frontier(
        depth=1,
        node_ids=np.zeros((b, 1), np.int64),
        tokens=root_tokens.reshape(b, 1).copy(),
        scores=np.ones((b, 1), np.float32),
        hidden_states=root_hidden_states.copy(),
    )
    input_count, mask = 1, np.zeros((b, 1, 0), np.bool_)
    mask_nodes = np.zeros((b, 0), np.int64)
    records = []
    while True:
        record = _run_depth(config, state, frontier, input_count, mask, sampler, hot_token_id,
                            forced_width(widths, frontier.depth))
        records.append(record)
        stop = _stop_reason(config, record, state.cumu_count, input_count)
        if stop:
            break
        frontier, mask, input_count = _next_frontier(record, input_count)
        mask_nodes = np.concatenate([mask_nodes, frontier.node_ids], axis=1)
    return DraftRoundResult(
        config=config, cumu_tokens=state.cumu_tokens, cumu_scores=state.cumu_scores,
        cumu_deltas=state.cumu_deltas, prev_indexs=state.prev_indexs,
        next_indexs=state.next_indexs, side_indexs=state.side_indexs,
        cumu_count=state.cumu_count, sort_scores=state.sort_scores,
        work_scores=state.work_scores, mask_nodes=mask_nodes, depths=records,
        stop_reason=stop,
    )


def synthetic_sampler(seed, vocab_size, node_top_k, *, hidden_size=0, concentration=0.5):
    """Return a seeded random sampler usable as ``draft_round``'s ``sampler``.

    Parameters:
        seed: seed of the ``numpy.random.default_rng`` stream (calls are reproducible in
            order).
        vocab_size: token ids are drawn from ``0..vocab_size-1`` (``>= node_top_k``).
        node_top_k: K, children per frontier node.
        hidden_size: H; if > 0 the sample carries standard-normal float32 hidden states
            [B, W, H], else ``None``.
        concentration: Dirichlet parameter of the per-node distribution over K+1 outcomes
            (small values give peaked distributions).

    Per frontier node: probabilities are the K largest components of a Dirichlet draw over
    K+1 outcomes, scaled by ``1 - 2**-20`` before the float32 cast so their float32 sum stays
    <= 1, in descending order (non-increasing; exact ties are possible); tokens are K distinct
    ids.
    """
    k = check_int("node_top_k", node_top_k, 1, MAX_NODE_TOP_K)
    vocab = check_int("vocab_size", vocab_size, k, lo_name="`node_top_k`")
    hidden_size = check_int("hidden_size", hidden_size, 0)
    rng = np.random.default_rng(seed)

    def sample(depth, frontier):
        b, w = frontier.node_ids.shape
        draws = rng.dirichlet(np.full(k + 1, concentration), size=b * w)
        top = -np.sort(-draws, axis=1)[:, :k] * (1.0 - 2.0**-20)
        tokens = np.stack([rng.choice(vocab, size=k, replace=False) for _ in range(b * w)])
        hidden = None
        if hidden_size > 0:
            hidden = rng.standard_normal((b, w, hidden_size)).astype(np.float32)
        return DraftSample(
            probas=top.astype(np.float32).reshape(b, w * k),
            tokens=tokens.astype(np.int64).reshape(b, w * k),
            hidden_states=hidden,
        )

    return sample
