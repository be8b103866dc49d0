"""K2 ``update_cumu_draft_state`` golden model (docs/kernels.md §3).

One call appends the ``N = W*K`` candidates of one depth to the cumulative draft tree of every
request, links them under their frontier parents, emits the ``K`` best candidates (scores,
tokens, tree-mask rows) for the next depth, and keeps the running "best ``verify_num`` scores"
list (``sort_scores``) plus the ``work_scores`` row that K3 consumes.

Node-budget overflow (``cumu_count + N > max_node_count``): appends at slots ``>= MAXN`` are
dropped exactly as §3 step 3 says, and the overflow is reported by the host API in two ways:
``node_budget_overflow(...)`` tells a caller beforehand how many appends per request would be
dropped, and the op itself either raises :class:`NodeBudgetError` before writing anything
(``strict=True``) or emits a :class:`NodeBudgetWarning` and then performs the CUDA-faithful
partial update (``strict=False``, the default).
"""

import warnings

import numpy as np

from ._abi import check_index_range, check_int, in_view, out_view

__all__ = [
    "CUMU_SCORE_SCALE",
    "MAX_CANDIDATES",
    "MAX_NODE_TOP_K",
    "NodeBudgetError",
    "NodeBudgetWarning",
    "clamp_verify_num",
    "node_budget_overflow",
    "update_cumu_draft_state",
]

# 0.9999f, bits 0x3F7FF972: every stored score of depth >= 2 is multiplied by it once.
CUMU_SCORE_SCALE = np.array([0x3F7FF972], dtype=np.uint32).view(np.float32)[0]
MAX_NODE_TOP_K = 16
# §1 extension: N = W*K up to 128 (the 128-lane sort); K2 itself does not sort.
MAX_CANDIDATES = 128


class NodeBudgetError(ValueError):
    """Raised by ``update_cumu_draft_state(..., strict=True)`` when appends would be dropped."""


class NodeBudgetWarning(UserWarning):
    """Emitted by ``update_cumu_draft_state`` (``strict=False``) when appends are dropped."""


def clamp_verify_num(verify_num, max_verify_num):
    """Return ``v = clamp(verify_num, 1, max_verify_num)`` (§3 step 5, §5).

    Parameters: ``verify_num`` requested verify-set size (any integer); ``max_verify_num`` the
    buffer capacity ``MAXV`` (>= 1).
    """
    return min(max(int(verify_num), 1), int(max_verify_num))


# --- K2 -------------------------------------------------------------------------------------


def node_budget_overflow(cumu_count, node_top_k, tree_width, max_node_count):
    """Return how many of one depth's ``N = W*K`` appends per request fall at slots ``>= MAXN``.

    Parameters: ``cumu_count`` valid nodes before the append; ``node_top_k`` ``K``;
    ``tree_width`` ``W``; ``max_node_count`` ``MAXN``. Zero means the depth fits.
    """
    candidates = int(node_top_k) * int(tree_width)
    return min(candidates, max(0, int(cumu_count) + candidates - int(max_node_count)))


def _merge_descending(a, c, count):
    """First ``count`` values of the merge of descending ``a`` and ``c`` (take ``a`` if a >= c)."""
    merged = np.empty(count, dtype=np.float32)
    i = j = 0
    for out in range(count):
        # float compare: -0.0 >= +0.0 holds, so an A/C tie between zeros takes A.
        if j >= len(c) or (i < len(a) and a[i] >= c[j]):
            merged[out] = a[i]
            i += 1
        else:
            merged[out] = c[j]
            j += 1
    return merged


def _update_request(ins, outs, b, k, w, mask_cols, start, v, maxn):
    """Run §3 steps 1-6 for request ``b`` (``ins``/``outs``: dicts of shaped arrays/views)."""
    n = w * k
    sorted_idx = ins["sorted_indexs"][b]
    # Step 1: the K best candidates of this depth.
    outs["output_scores"][b] = ins["sorted_scores"][b, :k]
    outs["output_tokens"][b] = ins["topk_tokens"][b, sorted_idx[:k]]
    # Step 2: mask rows of the parents; columns >= input_count-1 (self bit) are not written.
    if mask_cols > 0:
        parent_rows = ins["input_tree_mask"][b, ins["parent_indexs"][b]]
        outs["output_tree_mask"][b, :, :mask_cols] = parent_rows[:, :mask_cols]
    # Step 3: append all N candidates in candidate order; slots >= MAXN are dropped.
    fit = min(max(maxn - start, 0), n)
    t = np.arange(fit, dtype=np.int64)
    g = start + t
    outs["cumu_tokens"][b, g] = ins["topk_tokens"][b, :fit]
    outs["cumu_scores"][b, g] = ins["topk_probas"][b, :fit] * CUMU_SCORE_SCALE
    outs["cumu_deltas"][b, g] = ins["curr_depth"]
    outs["prev_indexs"][b, g] = ins["topk_indexs"][b, t // k]
    outs["next_indexs"][b, g] = -1
    outs["side_indexs"][b, g] = np.where(t % k == k - 1, -1, g + 1)
    # Step 4: first-child links in ascending w, so a duplicated parent keeps the last (highest w).
    for slot in range(w):
        parent = int(ins["topk_indexs"][b, slot])
        if 0 <= parent < maxn:
            outs["next_indexs"][b, parent] = start + slot * k
    # Step 5: work_scores = old best list (before step 6) followed by the K outputs.
    ws0 = min(v, start)
    old_best = outs["sort_scores"][b, :ws0].copy()
    outs["work_scores"][b, :ws0] = old_best
    outs["work_scores"][b, ws0 : ws0 + k] = outs["output_scores"][b]
    # Step 6: merge the unscaled sorted scores into the best list.
    ws1 = min(v, start + n)
    outs["sort_scores"][b, :ws1] = _merge_descending(old_best, ins["sorted_scores"][b], ws1)


def update_cumu_draft_state(
    topk_probas,
    topk_tokens,
    sorted_scores,
    sorted_indexs,
    parent_indexs,
    topk_indexs,
    input_tree_mask,
    batch_size,
    node_top_k,
    tree_width,
    input_count,
    cumu_count,
    verify_num,
    curr_depth,
    max_input_size,
    max_node_count,
    max_verify_num,
    cumu_tokens,
    cumu_scores,
    cumu_deltas,
    prev_indexs,
    next_indexs,
    side_indexs,
    output_scores,
    output_tokens,
    work_scores,
    sort_scores,
    output_tree_mask,
    *,
    strict=False,
):
    """K2: append one depth to the cumulative draft tree, in place (docs/kernels.md §3).

    Arrays may be flat (as in the CUDA captures) or shaped; outputs are written through
    reshaped views of the caller's arrays, which must therefore be C-contiguous and writable.
    Only the elements §3 assigns are written. Returns ``None``.

    Parameters (ABI order; ``N = tree_width * node_top_k``):
        topk_probas: f32 [B, N] candidate scores to store (times 0.9999f) — the K1
            ``curr_layer_scores`` in the draft round.
        topk_tokens: i64 [B, N] candidate tokens.
        sorted_scores, sorted_indexs: f32 / i64 [B, N] K1's descending sort of this depth.
        parent_indexs: i64 [B, K] frontier slot (0..W-1) of each of the K best.
        topk_indexs: i64 [B, W] node id of each frontier slot (parents of the appends).
        input_tree_mask: bool [B, W, max(input_count-1, 0)] mask rows of the frontier.
        batch_size: ``B`` (>= 0; 0 is a no-op after validation).
        node_top_k: ``K`` in 1..16.  tree_width: ``W`` in 1..K, with ``N <= 128``.
        input_count: 0..max_input_size+1; ``input_count - 1 <= 0`` means no mask column is
            copied (the self bit of a row lives at column ``input_count - 1 <= max_input_size``).
        cumu_count: valid nodes before the append (>= 0); ``start`` of the append.
        verify_num: any integer, clamped to ``1..max_verify_num``.
        curr_depth: depth label written to ``cumu_deltas`` of the appends (>= 0).
        max_input_size: ``MI`` (>= 0).  max_node_count: ``MAXN`` (>= 1).
        max_verify_num: ``MAXV`` (>= 1).
        cumu_tokens, cumu_scores, cumu_deltas, prev_indexs, next_indexs, side_indexs:
            i64/f32/i64/i64/i64/i64 [B, MAXN] cumulative tree (in/out).
        output_scores, output_tokens: f32 / i64 [B, K] (out).
        work_scores: f32 [B, MAXV+K] (out, partially).  sort_scores: f32 [B, MAXV] (in/out).
        output_tree_mask: bool [B, K, MI+1] (out, columns < input_count-1 only).
        strict: keyword, host API only. ``True``: raise :class:`NodeBudgetError` before any
            write if ``cumu_count + N > max_node_count``. ``False`` (default): emit a
            :class:`NodeBudgetWarning` and do the CUDA-faithful partial update (appends at
            slots ``>= MAXN`` dropped; the last kept append's ``side_indexs`` and the parents'
            ``next_indexs`` may then name a dropped slot ``>= MAXN``, exactly as §3 says).

    Duplicate frontier parents (two slots ``w1 < w2`` with the same node id ``p``): both
    children blocks are appended with ``prev_indexs = p`` and step 4 writes
    ``next_indexs[p]`` twice; the last write wins, so ``next_indexs[p] = start + w2*K`` and the
    block of ``w1`` is unreachable through the links (it stays in the arrays).

    Raises ``ValueError`` (messages name the argument) for invalid scalars, dtypes, element
    counts, non-writable/non-contiguous outputs, ``sorted_indexs`` outside ``0..N-1`` or
    ``parent_indexs`` outside ``0..W-1``; nothing is written then.
    """
    b_count = check_int("batch_size", batch_size, 0)
    k = check_int("node_top_k", node_top_k, 1, MAX_NODE_TOP_K)
    w = check_int("tree_width", tree_width, 1, k, hi_name="`node_top_k`")
    n = w * k
    if n > MAX_CANDIDATES:
        raise ValueError(
            f"`node_top_k` * `tree_width` must be at most {MAX_CANDIDATES}, not {n}"
        )
    mi = check_int("max_input_size", max_input_size, 0)
    count_in = check_int(
        "input_count", input_count, 0, mi + 1, hi_name="`max_input_size` + 1"
    )
    start = check_int("cumu_count", cumu_count, 0)
    if isinstance(verify_num, bool) or not isinstance(verify_num, int | np.integer):
        raise ValueError(f"`verify_num` must be an integer, not {verify_num!r}")
    depth = check_int("curr_depth", curr_depth, 0)
    maxn = check_int("max_node_count", max_node_count, 1)
    maxv = check_int("max_verify_num", max_verify_num, 1)
    mask_cols = max(count_in - 1, 0)

    ins = {
        "topk_probas": in_view("topk_probas", topk_probas, (b_count, n), np.float32),
        "topk_tokens": in_view("topk_tokens", topk_tokens, (b_count, n), np.int64),
        "sorted_scores": in_view("sorted_scores", sorted_scores, (b_count, n), np.float32),
        "sorted_indexs": in_view("sorted_indexs", sorted_indexs, (b_count, n), np.int64),
        "parent_indexs": in_view("parent_indexs", parent_indexs, (b_count, k), np.int64),
        "topk_indexs": in_view("topk_indexs", topk_indexs, (b_count, w), np.int64),
        "input_tree_mask": in_view(
            "input_tree_mask", input_tree_mask, (b_count, w, mask_cols), np.bool_
        ),
        "curr_depth": depth,
    }
    tree_shape = (b_count, maxn)
    outs = {
        "cumu_tokens": out_view("cumu_tokens", cumu_tokens, tree_shape, np.int64),
        "cumu_scores": out_view("cumu_scores", cumu_scores, tree_shape, np.float32),
        "cumu_deltas": out_view("cumu_deltas", cumu_deltas, tree_shape, np.int64),
        "prev_indexs": out_view("prev_indexs", prev_indexs, tree_shape, np.int64),
        "next_indexs": out_view("next_indexs", next_indexs, tree_shape, np.int64),
        "side_indexs": out_view("side_indexs", side_indexs, tree_shape, np.int64),
        "output_scores": out_view("output_scores", output_scores, (b_count, k), np.float32),
        "output_tokens": out_view("output_tokens", output_tokens, (b_count, k), np.int64),
        "work_scores": out_view("work_scores", work_scores, (b_count, maxv + k), np.float32),
        "sort_scores": out_view("sort_scores", sort_scores, (b_count, maxv), np.float32),
        "output_tree_mask": out_view(
            "output_tree_mask", output_tree_mask, (b_count, k, mi + 1), np.bool_
        ),
    }
    check_index_range("sorted_indexs", ins["sorted_indexs"], 0, n, "N")
    check_index_range("parent_indexs", ins["parent_indexs"], 0, w, "`tree_width`")

    dropped = node_budget_overflow(start, k, w, maxn)
    if dropped and b_count:
        message = (
            f"`cumu_count` + N = {start + n} exceeds `max_node_count` = {maxn}: "
            f"{dropped} appends per request are dropped"
        )
        if strict:
            raise NodeBudgetError(message)
        warnings.warn(message, NodeBudgetWarning, stacklevel=2)

    v = clamp_verify_num(verify_num, maxv)
    for b in range(b_count):
        _update_request(ins, outs, b, k, w, mask_cols, start, v, maxn)
