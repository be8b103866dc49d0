"""K3 ``calculate_work_deltas`` and the width policy (docs/kernels.md §5).

K3 reads the ``work_scores`` row K2 wrote (step 5): ``A`` = the best ``ws0`` verify scores so
far (descending), then ``C`` = this depth's ``K`` outputs (descending). ``work_deltas[w]`` is
the gain in the total verify-set score from adding the ``w`` best new nodes, summed over the
batch. The width policy turns those gains into the next depth's width ``W'``.

Every ``+``/``-`` below is one IEEE float32 operation on numpy float32 scalars (round to
nearest even), in the order §5 gives, so the result is bit-exact with the hardware.
"""

import numpy as np

from ._abi import check_int, in_view, out_view
from .update_state import MAX_NODE_TOP_K, clamp_verify_num

__all__ = ["calculate_work_deltas", "request_work_deltas", "width_policy"]

_ZERO = np.float32(0.0)


def request_work_deltas(old_best, new_scores, verify_num):
    """Return the cumulative gains ``D[0..K]`` (float32) of one request (§5 inner loop).

    Parameters:
        old_best: float32 [ws0], ``A``: the current verify set's scores, descending.
        new_scores: float32 [K], ``C``: this depth's K best scores, descending.
        verify_num: ``v`` (already clamped, >= 1): size of the verify set.

    ``D[0] = 0``; for w = 1..K the w-th new node enters free while the set is not full
    (``a + w-1 < v``), else displaces the smallest kept old score ``A[a-1]`` if it is strictly
    larger, else gains nothing. ``D[w] = D[w-1] + g`` as one float32 add.
    """
    deltas = np.zeros(len(new_scores) + 1, dtype=np.float32)
    kept = len(old_best)
    total = _ZERO
    for w in range(1, len(new_scores) + 1):
        c = new_scores[w - 1]
        if kept + (w - 1) < verify_num:
            gain = c
        elif kept > 0 and c > old_best[kept - 1]:
            gain = c - old_best[kept - 1]
            kept -= 1
        else:
            gain = _ZERO
        total = np.float32(total + gain)
        deltas[w] = total
    return deltas


def calculate_work_deltas(
    work_scores, work_deltas, batch_size, node_top_k, cumu_count, verify_num, max_verify_num
):
    """K3: batch-summed gain of expanding the w best new nodes, w = 0..K, in place (§5).

    Parameters (ABI order):
        work_scores: f32 [B, MAXV+K] (in), flat or shaped: the rows K2 step 5 wrote.
        work_deltas: f32 [K+1] (out, fully overwritten), C-contiguous and writable.
        batch_size: ``B`` (>= 0; with 0 the output is all +0.0).
        node_top_k: ``K`` in 1..16.
        cumu_count: the ``cumu_count`` passed to the K2 call that wrote ``work_scores`` (the
            count *before* that depth's append), so that ``ws0 = min(v, cumu_count)`` matches.
        verify_num: any integer, clamped to ``v = clamp(verify_num, 1, MAXV)``.
        max_verify_num: ``MAXV`` (>= 1).

    ``work_deltas[w]`` starts at +0.0 and receives each request's ``D[w]`` in ascending b, one
    float32 add each. Returns ``None``; raises ``ValueError`` (nothing written) on invalid
    arguments.
    """
    b_count = check_int("batch_size", batch_size, 0)
    k = check_int("node_top_k", node_top_k, 1, MAX_NODE_TOP_K)
    count = check_int("cumu_count", cumu_count, 0)
    if isinstance(verify_num, bool) or not isinstance(verify_num, int | np.integer):
        raise ValueError(f"`verify_num` must be an integer, not {verify_num!r}")
    maxv = check_int("max_verify_num", max_verify_num, 1)
    scores = in_view("work_scores", work_scores, (b_count, maxv + k), np.float32)
    out = out_view("work_deltas", work_deltas, (k + 1,), np.float32)

    v = clamp_verify_num(verify_num, maxv)
    ws0 = min(v, count)
    acc = np.zeros(k + 1, dtype=np.float32)
    for b in range(b_count):
        # One elementwise float32 add per w: same rounding as a scalar add.
        acc = acc + request_work_deltas(scores[b, :ws0], scores[b, ws0 : ws0 + k], v)
    out[...] = acc


def width_policy(work_deltas, node_top_k, batch_size, cost_per_node=0.0):
    """Next tree width ``W' = max{w in 0..K : w == 0 or marginal(w) >= threshold}`` (§5).

    Parameters:
        work_deltas: f32 [K+1] from :func:`calculate_work_deltas` (flat).
        node_top_k: ``K`` in 1..16.
        batch_size: ``B`` (>= 0).
        cost_per_node: per-node cost, rounded to float32 (default 0.0).

    ``marginal(w) = work_deltas[w] - work_deltas[w-1]`` is one float32 subtraction, and the
    threshold is float32 too: ``float32(float32(cost_per_node) * float32(B))``, one rounded
    float32 multiply (the hardware receives it precomputed). The maximum is taken over every
    w, so a failing w below a passing one does not stop the search. ``W' = 0`` means stop.
    Returns a Python int.
    """
    k = check_int("node_top_k", node_top_k, 1, MAX_NODE_TOP_K)
    b_count = check_int("batch_size", batch_size, 0)
    deltas = in_view("work_deltas", work_deltas, (k + 1,), np.float32)
    threshold = np.float32(np.float32(cost_per_node) * np.float32(b_count))
    marginal = deltas[1:] - deltas[:-1]
    passing = np.flatnonzero(marginal >= threshold)
    return int(passing[-1]) + 1 if passing.size else 0
