"""Draft-side GPU kernels (Triton) with the semantics of the project's goldens.

* :func:`score`: K1 ``draft_tree_layer_score_index_gen_op`` (golden ``golden.score``,
  docs/kernels.md §1-2): one program per request: ``curr = probas * last_layer_scores`` (one
  float32 multiply), the ``hot_token_id`` remap in place, the §1 sort network (64 or 128
  lanes, the exact compare-exchange order, so ties come out as the golden's), the K best's
  cache indices and parents, and the gather of their parents' hidden rows (fp16, H elements).
* :func:`update_state`: K2 ``update_cumu_draft_state`` (golden ``golden.update_state``, §3):
  one program per request: outputs, mask rows, appends, first-child links, ``work_scores`` and
  the merge of the best-score list (merge positions by rank counts).
* :func:`work_deltas`: K3 ``calculate_work_deltas`` (golden ``golden.work_deltas``, §5): one
  program, a lane per request, then the requests' gains added in ascending ``b`` (one float32
  add each), bit-exact with the golden.
"""

import triton
import triton.language as tl

from .launch import launch

__all__ = ["score", "update_state", "work_deltas", "KERNELS"]

#: K2's score factor 0.9999f (bits 0x3F7FF972).
_CUMU_SCORE_SCALE = tl.constexpr(0.9999)
#: The sort's pad lane score, -1e10f (bits 0xD01502F9).
_PAD = tl.constexpr(-1e10)


@triton.jit
def _compare_exchange(s, idx, lane, size: tl.constexpr, stride: tl.constexpr,
                      SORT: tl.constexpr):
    """One stage of §1: lane ``i`` (bit ``stride`` clear) against ``i + stride``; descending
    where ``i AND size == 0``; strict compares (ties never swap)."""
    shape: tl.constexpr = (SORT // (2 * stride), 2, stride)
    s_l, s_r = tl.split(tl.permute(tl.reshape(s, shape), (0, 2, 1)))
    i_l, i_r = tl.split(tl.permute(tl.reshape(idx, shape), (0, 2, 1)))
    lane_l, _ = tl.split(tl.permute(tl.reshape(lane, shape), (0, 2, 1)))
    descending = (lane_l & size) == 0
    swap = tl.where(descending, s_l < s_r, s_l > s_r)
    new_s = tl.join(tl.where(swap, s_r, s_l), tl.where(swap, s_l, s_r))
    new_i = tl.join(tl.where(swap, i_r, i_l), tl.where(swap, i_l, i_r))
    s = tl.reshape(tl.permute(new_s, (0, 2, 1)), (SORT,))
    idx = tl.reshape(tl.permute(new_i, (0, 2, 1)), (SORT,))
    return s, idx


@triton.jit
def _sort_network(s, idx, lane, LOG_SORT: tl.constexpr, SORT: tl.constexpr):
    """The §1 network: sizes 2 .. SORT, strides size/2 .. 1."""
    for size_log in tl.static_range(1, LOG_SORT + 1):
        for back in tl.static_range(0, size_log):
            s, idx = _compare_exchange(s, idx, lane, 1 << size_log,
                                       1 << (size_log - 1 - back), SORT)
    return s, idx


@triton.jit
def _score_kernel(probas_ptr, tokens_ptr, last_ptr, hidden_in_ptr, hot_ptr, curr_ptr,
                  sorted_s_ptr, sorted_i_ptr, cache_ptr, parents_ptr, hidden_out_ptr,
                  N, W, cumu_count, hot_size, H,
                  K: tl.constexpr, USE_HOT: tl.constexpr, SORT: tl.constexpr,
                  LOG_SORT: tl.constexpr, BLOCK_H: tl.constexpr):
    """One program per request: K1 (see the module)."""
    b = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, SORT)
    valid = lane < N
    p = tl.load(probas_ptr + b * N + lane, mask=valid, other=0.0)
    last = tl.load(last_ptr + b * W + lane // K, mask=valid, other=0.0)
    curr = p * last
    tl.store(curr_ptr + b * N + lane, curr, mask=valid)
    if USE_HOT:
        tok = tl.load(tokens_ptr + b * N + lane, mask=valid, other=0)
        hot = (tok >= 0) & (tok < hot_size)
        mapped = tl.load(hot_ptr + tl.where(hot, tok, 0), mask=valid & hot, other=0)
        tl.store(tokens_ptr + b * N + lane, tl.where(hot, mapped, tok), mask=valid)
    s = tl.where(valid, curr, _PAD)
    s, idx = _sort_network(s, lane, lane, LOG_SORT, SORT)
    tl.store(sorted_s_ptr + b * N + lane, s, mask=valid)
    tl.store(sorted_i_ptr + b * N + lane, idx.to(tl.int64), mask=valid)
    best = lane < K
    tl.store(cache_ptr + b * K + lane, cumu_count + idx.to(tl.int64), mask=best)
    tl.store(parents_ptr + b * K + lane, (idx // K).to(tl.int64), mask=best)
    offs = tl.arange(0, BLOCK_H)
    for k in tl.static_range(K):
        parent = tl.sum(tl.where(lane == k, idx // K, 0), axis=0).to(tl.int64)
        src = hidden_in_ptr + (b * W + parent) * H
        dst = hidden_out_ptr + (b * K + k) * H
        for start in range(0, H, BLOCK_H):
            h = start + offs
            tl.store(dst + h, tl.load(src + h, mask=h < H), mask=h < H)


def score(topk_probas_sampling, topk_tokens_sampling, last_layer_scores, curr_layer_scores,
          sort_layer_scores, sort_layer_indices, cache_topk_indices, parent_indices_in_layer,
          input_hidden_states, output_hidden_states, hot_token_id, batch_size, node_top_k,
          tree_width, cumu_count, use_hot_token_id, *, sort_width: int = 64) -> None:
    """K1 in the golden's ABI (argument order of ``draft_tree_layer_score_index_gen_op``) on
    device tensors; ``sort_width`` 64 or 128."""
    if sort_width not in (64, 128):
        raise ValueError(f"`sort_width` must be 64 or 128, not {sort_width}")
    n = node_top_k * tree_width
    h = input_hidden_states.shape[-1]
    launch(_score_kernel, (batch_size,), topk_probas_sampling, topk_tokens_sampling,
           last_layer_scores, input_hidden_states, hot_token_id, curr_layer_scores,
           sort_layer_scores, sort_layer_indices, cache_topk_indices, parent_indices_in_layer,
           output_hidden_states, n, tree_width, cumu_count, hot_token_id.numel(), h,
           K=node_top_k, USE_HOT=bool(use_hot_token_id), SORT=sort_width,
           LOG_SORT=sort_width.bit_length() - 1, BLOCK_H=min(1024, triton.next_power_of_2(h)))


@triton.jit
def _update_kernel(probas_ptr, tokens_ptr, sorted_s_ptr, sorted_i_ptr, parents_ptr,
                   topk_idx_ptr, in_mask_ptr, tokens_cumu_ptr, scores_cumu_ptr, deltas_ptr,
                   prev_ptr, next_ptr, side_ptr, out_scores_ptr, out_tokens_ptr, work_ptr,
                   sort_scores_ptr, out_mask_ptr, N, W, mask_cols, start, v, depth, maxn,
                   maxv, mi, K: tl.constexpr, KB: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr):
    """One program per request: K2 (§3 steps 1-6)."""
    b = tl.program_id(0).to(tl.int64)
    t = tl.arange(0, BLOCK_N)
    kk = tl.arange(0, KB)
    best = kk < K
    # 1. the K best of this depth
    sorted_s = tl.load(sorted_s_ptr + b * N + t, mask=t < N, other=float("-inf"))
    best_i = tl.load(sorted_i_ptr + b * N + kk, mask=best, other=0)
    best_s = tl.load(sorted_s_ptr + b * N + kk, mask=best, other=0.0)
    tl.store(out_scores_ptr + b * K + kk, best_s, mask=best)
    tl.store(out_tokens_ptr + b * K + kk, tl.load(tokens_ptr + b * N + best_i, mask=best),
             mask=best)
    # 2. the parents' mask rows, columns < input_count - 1
    parent = tl.load(parents_ptr + b * K + kk, mask=best, other=0)
    cols = tl.arange(0, BLOCK_C)
    for c0 in range(0, mask_cols, BLOCK_C):
        c = c0 + cols
        keep = best[:, None] & (c[None, :] < mask_cols)
        row = tl.load(in_mask_ptr + (b * W + parent[:, None]) * mask_cols + c[None, :],
                      mask=keep, other=0)
        tl.store(out_mask_ptr + (b * K + kk[:, None]) * (mi + 1) + c[None, :], row, mask=keep)
    # 3. append all N candidates in candidate order (slots >= MAXN dropped)
    g = start + t
    fits = (t < N) & (g < maxn)
    tl.store(tokens_cumu_ptr + b * maxn + g, tl.load(tokens_ptr + b * N + t, mask=fits),
             mask=fits)
    scaled = tl.load(probas_ptr + b * N + t, mask=fits, other=0.0) * _CUMU_SCORE_SCALE
    tl.store(scores_cumu_ptr + b * maxn + g, scaled, mask=fits)
    tl.store(deltas_ptr + b * maxn + g, tl.zeros_like(g) + depth, mask=fits)
    tl.store(prev_ptr + b * maxn + g, tl.load(topk_idx_ptr + b * W + t // K, mask=fits),
             mask=fits)
    tl.store(next_ptr + b * maxn + g, tl.zeros_like(g) - 1, mask=fits)
    tl.store(side_ptr + b * maxn + g, tl.where(t % K == K - 1, -1, g + 1), mask=fits)
    # 4. first-child links, in ascending w (a repeated parent keeps the last)
    for w in range(0, W):
        p = tl.load(topk_idx_ptr + b * W + w)
        if (p >= 0) & (p < maxn):
            tl.store(next_ptr + b * maxn + p, start + w * K)
    # 5. work_scores = the best list before step 6, then the K outputs
    ws0 = tl.minimum(v, start)
    a_lane = tl.arange(0, BLOCK_V)
    old = tl.load(sort_scores_ptr + b * maxv + a_lane, mask=a_lane < ws0, other=0.0)
    work_row = work_ptr + b * (maxv + K)
    tl.store(work_row + a_lane, old, mask=a_lane < ws0)
    tl.store(work_row + ws0 + kk, best_s, mask=best)
    # 6. merge the old best list A with this depth's sorted scores C (A first on ties)
    ws1 = tl.minimum(v, start + N)
    in_a = a_lane < ws0
    in_c = t < N
    c_before_a = tl.sum(((sorted_s[None, :] > old[:, None]) & in_c[None, :]).to(tl.int32),
                        axis=1)
    a_before_c = tl.sum(((old[:, None] >= sorted_s[None, :]) & in_a[:, None]).to(tl.int32),
                        axis=0)
    pos_a = a_lane + c_before_a
    pos_c = t + a_before_c
    tl.debug_barrier()
    tl.store(sort_scores_ptr + b * maxv + pos_a, old, mask=in_a & (pos_a < ws1))
    tl.store(sort_scores_ptr + b * maxv + pos_c, sorted_s, mask=in_c & (pos_c < ws1))


def update_state(topk_probas, topk_tokens, sorted_scores, sorted_indexs, parent_indexs,
                 topk_indexs, input_tree_mask, batch_size, node_top_k, tree_width,
                 input_count, cumu_count, verify_num, curr_depth, max_input_size,
                 max_node_count, max_verify_num, cumu_tokens, cumu_scores, cumu_deltas,
                 prev_indexs, next_indexs, side_indexs, output_scores, output_tokens,
                 work_scores, sort_scores, output_tree_mask) -> None:
    """K2 in the golden's ABI (``update_cumu_draft_state``) on device tensors; masks as
    int8/bool tensors."""
    n = node_top_k * tree_width
    v = min(max(int(verify_num), 1), max_verify_num)
    mask_cols = max(input_count - 1, 0)
    launch(_update_kernel, (batch_size,), topk_probas, topk_tokens, sorted_scores,
           sorted_indexs, parent_indexs, topk_indexs, input_tree_mask, cumu_tokens,
           cumu_scores, cumu_deltas, prev_indexs, next_indexs, side_indexs, output_scores,
           output_tokens, work_scores, sort_scores, output_tree_mask, n, tree_width,
           mask_cols, cumu_count, v, curr_depth, max_node_count, max_verify_num,
           max_input_size, K=node_top_k, KB=triton.next_power_of_2(node_top_k),
           BLOCK_N=triton.next_power_of_2(n),
           BLOCK_V=triton.next_power_of_2(max_verify_num), BLOCK_C=32)


@triton.jit
def _work_deltas_kernel(work_ptr, deltas_ptr, B, ws0, v, row, K: tl.constexpr,
                        BLOCK_B: tl.constexpr, KP: tl.constexpr):
    """One program: per-request gains (a lane per request), then summed in ascending b."""
    rb = tl.arange(0, BLOCK_B)
    live = rb < B
    col = tl.arange(0, KP)
    kept = tl.zeros((BLOCK_B,), tl.int32) + ws0
    total = tl.zeros((BLOCK_B,), tl.float32)
    gains = tl.zeros((BLOCK_B, KP), tl.float32)
    for w in tl.static_range(1, K + 1):
        c = tl.load(work_ptr + rb * row + ws0 + w - 1, mask=live, other=0.0)
        enters = kept + (w - 1) < v
        smallest = tl.load(work_ptr + rb * row + kept - 1, mask=live & (kept > 0), other=0.0)
        displaces = (~enters) & (kept > 0) & (c > smallest)
        gain = tl.where(enters, c, tl.where(displaces, c - smallest, 0.0))
        kept = tl.where(displaces, kept - 1, kept)
        total = total + gain
        gains = tl.where(col[None, :] == w, total[:, None], gains)
    acc = tl.zeros((KP,), tl.float32)
    for b in range(0, B):
        acc = acc + tl.sum(tl.where(rb[:, None] == b, gains, 0.0), axis=0)
    tl.store(deltas_ptr + col, acc, mask=col < K + 1)


def work_deltas(work_scores, work_deltas_out, batch_size, node_top_k, cumu_count, verify_num,
                max_verify_num) -> None:
    """K3 in the golden's ABI (``calculate_work_deltas``) on device tensors."""
    v = min(max(int(verify_num), 1), max_verify_num)
    launch(_work_deltas_kernel, (1,), work_scores, work_deltas_out, batch_size,
           min(v, cumu_count), v, max_verify_num + node_top_k, K=node_top_k,
           BLOCK_B=max(2, triton.next_power_of_2(batch_size)),
           KP=triton.next_power_of_2(node_top_k + 1))


#: The Triton kernels of this module.
KERNELS = {"score": _score_kernel, "update_state": _update_kernel,
           "work_deltas": _work_deltas_kernel}
