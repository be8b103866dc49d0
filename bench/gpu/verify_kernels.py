"""Verify-side GPU kernels (Triton), each with the semantics of a project golden.

* :func:`tree_sampling_target_only`: sgl-kernel's ``tree_speculative_sampling_target_only``
  (golden ``golden.reject_sample.tree_speculative_sampling_target_only``, docs/kernels.md §8):
  one program per request, the sibling walk over ``target_probs``, rejected tokens' ``q``
  written to ``draft_probs``, the residual sampled by inverse CDF over the final row.
* :func:`verify_tree_greedy`: sgl-kernel's ``verify_tree_greedy`` (golden
  ``golden.reject_sample.verify_tree_greedy``) on ``target_predict`` (the argmax of every row).
* :func:`build_tree`: sgl-kernel's ``build_tree_kernel_efficient`` (golden
  ``golden.tree_mask.build_tree_kernel_efficient``) in modes ``QLEN_ONLY`` and
  ``QLEN_ONLY_BITPACKING``: one program per request, every position at once.
* :func:`visited_rows_verify`: the GPU's answer to the engine's fused verify (§10, golden
  ``golden.tree_verify.tree_speculative_sampling_from_logits``): one program per request walks
  the tree and reads only the logits rows it visits (bfloat16), each row's max and normaliser
  in one online pass; the residual draw re-reads the final row up to the drawn token.
  Temperature sampling with top-k / top-p off (the contract points' setting).

All loops are ``while`` loops on scalars or ``tl.static_range`` (no ``break``), so the kernels
compile for sm_90 as well as run under ``TRITON_INTERPRET=1``. Float arithmetic is float32
(SGLang's); sums over a row are block sums, which differ from the goldens' sequential sums
only in rounding (docs/kernels.md §8).
"""

import triton
import triton.language as tl

from .launch import launch

__all__ = ["tree_sampling_target_only", "verify_tree_greedy", "build_tree",
           "visited_rows_verify", "KERNELS", "BLOCK_V", "BLOCK_FINAL", "ROW_WARPS"]

#: Elements of a logits / probability row per block of a whole-row pass (4,096: sgl-kernel's
#: 1,024 threads with 4-wide loads), run by :data:`ROW_WARPS` warps.
BLOCK_V = 4096
ROW_WARPS = 8
#: Elements per block of the visited-rows kernel's final draw (it also compares each element
#: with the row's rejected tokens).
BLOCK_FINAL = 1024


@triton.jit
def _residual_draw(target_ptr, draft_ptr, row_off, V, coin, subtract: tl.constexpr,
                   BLOCK: tl.constexpr):
    """§8's final draw over one row: ``r = max(target - draft, 0)`` (``draft`` only when
    ``subtract``), ``u = coin * sum(r)``, the first ``j`` with ``r[j] > 0`` and
    ``prefix(r)[j] > u``; fallback the last ``j`` with ``r[j] > 0``, else ``V - 1``."""
    offs = tl.arange(0, BLOCK)
    total = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        j = start + offs
        t = tl.load(target_ptr + row_off + j, mask=j < V, other=0.0)
        if subtract:
            t = t - tl.load(draft_ptr + row_off + j, mask=j < V, other=0.0)
        total += tl.sum(tl.where(t > 0.0, t, 0.0), axis=0)
    u = coin * total
    running = tl.zeros((), tl.float32)
    first = tl.full((), -1, tl.int64)
    last_pos = tl.full((), -1, tl.int64)
    for start in range(0, V, BLOCK):
        j = start + offs
        t = tl.load(target_ptr + row_off + j, mask=j < V, other=0.0)
        if subtract:
            t = t - tl.load(draft_ptr + row_off + j, mask=j < V, other=0.0)
        r = tl.where(t > 0.0, t, 0.0)
        prefix = running + tl.cumsum(r, axis=0)
        hit = (r > 0.0) & (prefix > u) & (j < V)
        block_first = tl.min(tl.where(hit, j, V), axis=0).to(tl.int64)
        first = tl.where((first < 0) & (block_first < V), block_first, first)
        last_pos = tl.maximum(last_pos, tl.max(tl.where((r > 0.0) & (j < V), j, -1),
                                               axis=0).to(tl.int64))
        running += tl.sum(r, axis=0)
    return tl.where(first >= 0, first, tl.where(last_pos >= 0, last_pos, V - 1))


@triton.jit
def _tree_sampling_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr, ridx_ptr,
                          next_ptr, sib_ptr, coins_ptr, coin_final_ptr, target_ptr, draft_ptr,
                          threshold_single, threshold_acc, n, V,
                          S: tl.constexpr, BLOCK: tl.constexpr):
    """One program per request: §8 on ``target_probs`` [B*n, V] (rows by tree position)."""
    b = tl.program_id(0).to(tl.int64)
    base = b * n
    coin = tl.load(coins_ptr + base)
    last = tl.load(ridx_ptr + base)
    tl.store(accept_index_ptr + b * S, last.to(tl.int32))
    prob_acc = tl.zeros((), tl.float32)
    row = tl.zeros((), tl.int64)
    accepted = tl.zeros((), tl.int32)
    cur = tl.zeros((), tl.int64)
    step = 1
    done = 0
    while (step < S) & (done == 0):
        cur = tl.load(next_ptr + base + cur)
        found = 0
        while (cur != -1) & (found == 0):
            tok = tl.load(cand_ptr + base + cur)
            q = tl.load(target_ptr + (base + row) * V + tok)
            prob_acc = prob_acc + q
            if (coin <= tl.math.div_rn(prob_acc, threshold_acc)) | (q >= threshold_single):
                prob_acc = tl.zeros((), tl.float32)
                coin = tl.load(coins_ptr + base + cur)
                tl.store(predicts_ptr + last, tok.to(tl.int32))
                accepted += 1
                last = tl.load(ridx_ptr + base + cur)
                tl.store(accept_index_ptr + b * S + accepted, last.to(tl.int32))
                row = cur
                found = 1
            else:
                tl.store(draft_ptr + (base + row) * V + tok, q)
                cur = tl.load(sib_ptr + base + cur)
        done = 1 - found
        step += 1
    tl.store(accept_num_ptr + b, accepted)
    coin_final = tl.load(coin_final_ptr + b)
    if accepted == S - 1:
        token = _residual_draw(target_ptr, draft_ptr, (base + row) * V, V, coin_final, False,
                               BLOCK)
    else:
        token = _residual_draw(target_ptr, draft_ptr, (base + row) * V, V, coin_final, True,
                               BLOCK)
    tl.store(predicts_ptr + last, token.to(tl.int32))


def tree_sampling_target_only(predicts, accept_index, accept_token_num, candidates,
                              retrive_index, retrive_next_token, retrive_next_sibling,
                              uniform_samples, uniform_samples_for_final_sampling, target_probs,
                              draft_probs, threshold_single=1.0, threshold_acc=1.0) -> None:
    """sgl-kernel ``tree_speculative_sampling_target_only`` (same argument order, in place):
    ``predicts`` int32 [B*n] and ``accept_index`` int32 [B, S] pre-filled -1,
    ``accept_token_num`` int32 [B]; ``candidates``/``retrive_*`` int64 [B, n]; coins float32
    [B, n] and [B]; ``target_probs``, ``draft_probs`` float32 [B*n, V] (draft zero on
    entry)."""
    b, n = candidates.shape
    v = target_probs.shape[-1]
    launch(
        _tree_sampling_kernel, (b,), predicts, accept_index, accept_token_num, candidates,
        retrive_index, retrive_next_token, retrive_next_sibling, uniform_samples,
        uniform_samples_for_final_sampling, target_probs, draft_probs, float(threshold_single),
        max(float(threshold_acc), 1e-9), n, v, S=accept_index.shape[1], BLOCK=BLOCK_V,
        num_warps=ROW_WARPS)


@triton.jit
def _greedy_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr, ridx_ptr,
                   next_ptr, sib_ptr, target_predict_ptr, n, S: tl.constexpr):
    """One program per request: the §8 walk accepting ``candidates == target_predict[last]``."""
    b = tl.program_id(0).to(tl.int64)
    base = b * n
    last = tl.load(ridx_ptr + base)
    tl.store(accept_index_ptr + b * S, last.to(tl.int32))
    accepted = tl.zeros((), tl.int32)
    cur = tl.zeros((), tl.int64)
    step = 1
    done = 0
    while (step < S) & (done == 0):
        cur = tl.load(next_ptr + base + cur)
        found = 0
        while (cur != -1) & (found == 0):
            tok = tl.load(cand_ptr + base + cur)
            if tok == tl.load(target_predict_ptr + last):
                tl.store(predicts_ptr + last, tok.to(tl.int32))
                accepted += 1
                last = tl.load(ridx_ptr + base + cur)
                tl.store(accept_index_ptr + b * S + accepted, last.to(tl.int32))
                found = 1
            else:
                cur = tl.load(sib_ptr + base + cur)
        done = 1 - found
        step += 1
    tl.store(accept_num_ptr + b, accepted)
    tl.store(predicts_ptr + last, tl.load(target_predict_ptr + last).to(tl.int32))


def verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index,
                       retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """sgl-kernel ``verify_tree_greedy`` (same argument order, in place); ``target_predict``
    int64 [B*n] (the argmax of every row, by flat node id)."""
    b, n = candidates.shape
    launch(_greedy_kernel, (b,), predicts, accept_index, accept_token_num, candidates,
           retrive_index, retrive_next_token, retrive_next_sibling, target_predict, n,
           S=accept_index.shape[1])


@triton.jit
def _build_tree_kernel(parent_ptr, selected_ptr, seq_ptr, mask_ptr, positions_ptr, ridx_ptr,
                       next_ptr, sib_ptr, topk, n, L, DEPTH: tl.constexpr,
                       PACKED: tl.constexpr, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    """One program per request, one lane per position: parents decoded from ``parent_list``
    and ``selected_index`` as sgl-kernel does, ancestors walked ``DEPTH`` times, the mask row
    (bool ``n x n`` or bit-packed rows of ``STRIDE`` bytes), positions, retrive arrays and the
    links (first child = lowest child position, next sibling = next higher one)."""
    b = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK)
    valid = i < n
    draft = (i >= 1) & valid
    sel = tl.load(selected_ptr + b * (n - 1) + i - 1, mask=draft, other=0)
    block_row = sel // topk
    parent_token = tl.load(parent_ptr + b * L + block_row, mask=draft & (block_row > 0),
                           other=-2)
    sel_k = tl.load(selected_ptr + b * (n - 1) + i, mask=i < n - 1, other=-3)
    equal = (sel_k[None, :] == parent_token[:, None]) & (i[None, :] < n - 1)
    first = tl.min(tl.where(equal, i[None, :], BLOCK), axis=1)
    parent = tl.where(draft & (block_row > 0), first + 1, 0)
    cols = i[None, :]
    ancestors = (cols == i[:, None]) | (cols == 0)
    cur = i
    for _ in tl.static_range(DEPTH):
        cur = tl.sum(tl.where(cols == cur[:, None], parent[None, :], 0), axis=1)
        ancestors = ancestors | (cols == cur[:, None])
    ancestors = ancestors & valid[:, None] & valid[None, :]
    depth = tl.sum(ancestors.to(tl.int32), axis=1) - 1
    seq_len = tl.load(seq_ptr + b)
    tl.store(positions_ptr + b * n + i, seq_len + depth, mask=valid)
    tl.store(ridx_ptr + b * n + i, b * n + i, mask=valid)
    is_child = (parent[None, :] == i[:, None]) & (cols >= 1) & valid[None, :]
    first_child = tl.min(tl.where(is_child, cols, BLOCK), axis=1)
    tl.store(next_ptr + b * n + i, tl.where(first_child < BLOCK, first_child, -1), mask=valid)
    sibling = (parent[None, :] == parent[:, None]) & (cols > i[:, None]) & valid[None, :]
    next_sibling = tl.min(tl.where(sibling, cols, BLOCK), axis=1)
    tl.store(sib_ptr + b * n + i, tl.where(next_sibling < BLOCK, next_sibling, -1),
             mask=draft)
    if PACKED:
        weights = (1 << (cols % 8)).to(tl.int32)
        bits = tl.reshape(ancestors.to(tl.int32) * weights, (BLOCK, BLOCK // 8, 8))
        packed = tl.sum(bits, axis=2).to(tl.uint8)
        byte = tl.arange(0, BLOCK // 8)
        tl.store(mask_ptr + (b * n + i[:, None]) * STRIDE + byte[None, :], packed,
                 mask=valid[:, None] & (byte[None, :] < STRIDE) & (byte[None, :] * 8 < n))
    else:
        tl.store(mask_ptr + b * n * n + i[:, None] * n + cols, ancestors.to(tl.int8),
                 mask=valid[:, None] & valid[None, :])


def build_tree(parent_list, selected_index, verified_seq_len, tree_mask, positions,
               retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
               draft_token_num, tree_mask_mode) -> None:
    """sgl-kernel ``build_tree_kernel_efficient`` (same argument order, in place) in modes 1
    (``tree_mask`` int8/bool [B*n*n]) and 2 (uint8 [B*n*stride], zero-filled by the caller,
    stride 1, 2 or 4 bytes as sgl-kernel's); ``retrive_next_*`` pre-filled -1."""
    if tree_mask_mode not in (1, 2):
        raise ValueError(f"`tree_mask_mode` must be 1 or 2 here, not {tree_mask_mode}")
    bs, n = verified_seq_len.shape[0], draft_token_num
    block = max(8, triton.next_power_of_2(n))
    stride = tree_mask.numel() // (bs * n) if tree_mask_mode == 2 else 1
    launch(_build_tree_kernel, (bs,), parent_list, selected_index, verified_seq_len, tree_mask,
           positions, retrive_index, retrive_next_token, retrive_next_sibling, topk, n,
           parent_list.shape[1], DEPTH=depth, PACKED=tree_mask_mode == 2, STRIDE=stride,
           BLOCK=block)


@triton.jit
def _row_stats(logits_ptr, row_off, V, temperature, BLOCK: tl.constexpr):
    """Max and normaliser of ``softmax(row / T)`` in one online pass over the row."""
    offs = tl.arange(0, BLOCK)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        j = start + offs
        x = tl.load(logits_ptr + row_off + j, mask=j < V, other=float("-inf")).to(tl.float32)
        x = x / temperature
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    return m, s


@triton.jit
def _visited_rows_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr, ridx_ptr,
                         next_ptr, sib_ptr, coins_ptr, coin_final_ptr, logits_ptr, temps_ptr,
                         threshold_single, threshold_acc, n, V, S: tl.constexpr,
                         MAX_CHILDREN: tl.constexpr, BLOCK: tl.constexpr,
                         BLOCK_FINAL: tl.constexpr):
    """One program per request: §10 (sampling, top-k/top-p off) reading only visited rows."""
    b = tl.program_id(0).to(tl.int64)
    base = b * n
    temperature = tl.load(temps_ptr + b)
    coin = tl.load(coins_ptr + base)
    last = tl.load(ridx_ptr + base)
    tl.store(accept_index_ptr + b * S, last.to(tl.int32))
    row = tl.zeros((), tl.int64)
    m, s = _row_stats(logits_ptr, base * V, V, temperature, BLOCK)
    prob_acc = tl.zeros((), tl.float32)
    kids = tl.arange(0, MAX_CHILDREN)
    rejected = tl.full((MAX_CHILDREN,), -1, tl.int64)
    rejected_mass = tl.zeros((), tl.float32)
    n_rejected = 0
    accepted = tl.zeros((), tl.int32)
    cur = tl.zeros((), tl.int64)
    step = 1
    done = 0
    while (step < S) & (done == 0):
        cur = tl.load(next_ptr + base + cur)
        found = 0
        while (cur != -1) & (found == 0):
            tok = tl.load(cand_ptr + base + cur)
            x = tl.load(logits_ptr + (base + row) * V + tok).to(tl.float32) / temperature
            q = tl.exp(x - m) / s
            prob_acc = prob_acc + q
            if (coin <= tl.math.div_rn(prob_acc, threshold_acc)) | (q >= threshold_single):
                prob_acc = tl.zeros((), tl.float32)
                coin = tl.load(coins_ptr + base + cur)
                tl.store(predicts_ptr + last, tok.to(tl.int32))
                accepted += 1
                last = tl.load(ridx_ptr + base + cur)
                tl.store(accept_index_ptr + b * S + accepted, last.to(tl.int32))
                row = cur
                m, s = _row_stats(logits_ptr, (base + row) * V, V, temperature, BLOCK)
                rejected = tl.full((MAX_CHILDREN,), -1, tl.int64)
                rejected_mass = tl.zeros((), tl.float32)
                n_rejected = 0
                found = 1
            else:
                rejected = tl.where(kids == n_rejected, tok, rejected)
                rejected_mass += q
                n_rejected += 1
                cur = tl.load(sib_ptr + base + cur)
        done = 1 - found
        step += 1
    tl.store(accept_num_ptr + b, accepted)
    # Residual: the final row without the tokens rejected there (all of it after S-1 accepts).
    if accepted == S - 1:
        rejected = tl.full((MAX_CHILDREN,), -1, tl.int64)
        rejected_mass = tl.zeros((), tl.float32)
    u = tl.load(coin_final_ptr + b) * (1.0 - rejected_mass)
    offs = tl.arange(0, BLOCK_FINAL)
    running = tl.zeros((), tl.float32)
    token = tl.full((), -1, tl.int64)
    last_pos = tl.full((), -1, tl.int64)
    start = 0
    while (start < V) & (token < 0):
        j = start + offs
        x = tl.load(logits_ptr + (base + row) * V + j, mask=j < V,
                    other=float("-inf")).to(tl.float32) / temperature
        removed = tl.sum((j[:, None] == rejected[None, :]).to(tl.int32), axis=1) > 0
        r = tl.where(removed | (j >= V), 0.0, tl.exp(x - m) / s)
        prefix = running + tl.cumsum(r, axis=0)
        hit = (r > 0.0) & (prefix > u)
        block_first = tl.min(tl.where(hit, j, V), axis=0).to(tl.int64)
        token = tl.where(block_first < V, block_first, token)
        last_pos = tl.maximum(last_pos, tl.max(tl.where(r > 0.0, j, -1), axis=0).to(tl.int64))
        running += tl.sum(r, axis=0)
        start += BLOCK_FINAL
    token = tl.where(token >= 0, token, tl.where(last_pos >= 0, last_pos, V - 1))
    tl.store(predicts_ptr + last, token.to(tl.int32))


def visited_rows_verify(predicts, accept_index, accept_token_num, candidates, retrive_index,
                        retrive_next_token, retrive_next_sibling, uniform_samples,
                        uniform_samples_for_final_sampling, target_logits, temperatures,
                        threshold_single=1.0, threshold_acc=1.0, *, max_children: int) -> None:
    """§10's ABI (top-k/top-p off) on bfloat16 ``target_logits`` [B*n, V]: the visited-rows
    kernel. ``max_children``: the most children any node of the trees has (the rejected
    tokens of one row it keeps in registers)."""
    b, n = candidates.shape
    v = target_logits.shape[-1]
    launch(
        _visited_rows_kernel, (b,), predicts, accept_index, accept_token_num, candidates,
        retrive_index, retrive_next_token, retrive_next_sibling, uniform_samples,
        uniform_samples_for_final_sampling, target_logits, temperatures,
        float(threshold_single), max(float(threshold_acc), 1e-9), n, v,
        S=accept_index.shape[1], MAX_CHILDREN=max(2, triton.next_power_of_2(max_children)),
        BLOCK=BLOCK_V, BLOCK_FINAL=BLOCK_FINAL, num_warps=ROW_WARPS)


#: The Triton kernels of this module (the sm_90 compile check walks them).
KERNELS = {"tree_sampling": _tree_sampling_kernel, "verify_tree_greedy": _greedy_kernel,
           "build_tree": _build_tree_kernel, "visited_rows": _visited_rows_kernel}
