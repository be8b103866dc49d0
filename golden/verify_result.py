"""K7 ``update_verify_result`` golden model (docs/kernels.md §9).

After K6 (``draft_tree_reject_sample``) has walked every request's verify tree, this op
commits the result, as SGLang's ``EagleVerifyInput.verify`` post-processing does:

* the accepted tokens: request b accepts ``accept_token_num[b]`` draft tokens plus one bonus
  token, ``accept_length[b] = accept_token_num[b] + 1``; the tokens are ``predicts`` at the
  accepted flat ids ``accept_index[b, 0 .. accept_length-1]`` (``predicts[id]`` is the token
  chosen *after* node ``id``: the next accepted draft token, or the bonus for the last one);
* finishing: scanning those tokens in order, a request finishes at the first token that is
  ``eos_token_id`` or that brings its ``seq_lens`` to ``max_seq_lens``; the tokens after it
  are dropped (``accept_length`` shrinks), exactly as SGLang truncates ``accept_index``
  after the token on which ``req.check_finished()`` fires;
* KV cache: the verify forward wrote a KV slot ``out_cache_loc[id]`` for every draft node.
  The accepted nodes' slots (the root's, then each accepted draft node's; the bonus token has
  no KV yet) go to ``req_to_token[req_pool_indices[b], seq_lens[b] + j]`` for
  ``j < accept_length[b]``; every other node's slot of the request is marked in
  ``evict_mask`` (to be freed); ``seq_lens[b] += accept_length[b]``;
* ``verified_id``: the accepted tokens of all requests, concatenated in request order
  (request b starts at the exclusive prefix sum ``sum(accept_length[:b])``);
  ``next_root[b]`` is the request's last accepted token (the root of its next draft round);
  ``finished[b]`` says whether it finished (then :func:`golden.active_slots.compact_active_slots`
  drops it from the next batch).
"""

import numpy as np

from ._abi import check_index_range, check_int, in_view, out_view

__all__ = ["update_verify_result"]


def _request_plan(b, row, taken, predicts, seq_len, max_len, eos, n):
    """Accepted flat ids of request b after the finish check; ``(ids, finished)``."""
    ids = row[:taken]
    if ids[0] != b * n:
        raise ValueError(
            f"`accept_index`[{b}, 0] must be the root's flat id {b * n}, not {int(ids[0])}"
        )
    if ids.min() < b * n or ids.max() >= (b + 1) * n:
        bad = ids[(ids < b * n) | (ids >= (b + 1) * n)][0]
        raise ValueError(
            f"`accept_index` of request {b} must lie in {b * n}..{(b + 1) * n - 1}, not {bad}"
        )
    if len(np.unique(ids)) != len(ids):
        raise ValueError(f"`accept_index` of request {b} repeats a flat id")
    tokens = predicts[ids]
    if tokens.min() < 0:
        raise ValueError(
            f"`predicts` at the accepted flat ids of request {b} must be token ids (>= 0), "
            f"not {int(tokens.min())}"
        )
    if not 0 <= seq_len < max_len:
        raise ValueError(
            f"`seq_lens`[{b}] must be between 0 and `max_seq_lens`[{b}] - 1 "
            f"(an unfinished request), not {seq_len}"
        )
    for j, token in enumerate(tokens):
        if (eos >= 0 and int(token) == eos) or seq_len + j + 1 >= max_len:
            return ids[: j + 1], True
    return ids, False


def update_verify_result(
    accept_index,
    accept_token_num,
    predicts,
    out_cache_loc,
    req_pool_indices,
    max_seq_lens,
    batch_size,
    num_draft_tokens,
    num_speculative_tokens,
    max_context_len,
    eos_token_id,
    seq_lens,
    req_to_token,
    accept_length,
    verified_id,
    next_root,
    evict_mask,
    finished,
):
    """K7: commit the verify result of every request, in place (docs/kernels.md §9).

    ``B = batch_size``, ``n = num_draft_tokens`` (verify-tree size incl. the root),
    ``S = num_speculative_tokens`` (width of K6's ``accept_index``). Returns ``None``.

    Parameters (ABI order: K6's outputs in K6's order, the request state, the scalars, then
    the in/out state and the outputs):
        accept_index: i32 [B, S] from K6: flat ids (``b*n + position``) of the accepted
            nodes, ``accept_index[b, 0] = b*n`` (the root). Entries past
            ``accept_token_num[b]`` are not read.
        accept_token_num: i32 [B] from K6, ``0 .. S-1``: accepted draft tokens.
        predicts: i32 [B*n] (or [B*n + 1], SGLang's allocation) from K6: token chosen
            after each accepted node (read at the accepted flat ids only).
        out_cache_loc: i64 [B*n]: KV slot written by the verify forward for each draft node.
        req_pool_indices: i64 [B]: each request's row of ``req_to_token``, distinct.
        max_seq_lens: i64 [B]: length limit, ``seq_lens[b] < max_seq_lens[b] <=
            max_context_len`` on entry; a request finishes when ``seq_lens`` reaches it.
        batch_size: B >= 0 (0 is a no-op). num_draft_tokens: n >= 1.
        num_speculative_tokens: S >= 1. max_context_len: row length C >= 1 of
            ``req_to_token``. eos_token_id: integer; negative disables the EOS check.
        seq_lens: i64 [B] in/out: ``+= accept_length``.
        req_to_token: i64 [P, C] in/out (P = size / C rows): written at
            ``[req_pool_indices[b], seq_lens[b] + j]`` for ``j < accept_length[b]`` only.
        accept_length: i32 [B] out. verified_id: i32 [B*S] out, the first
            ``sum(accept_length)`` entries written (the rest are not touched).
        next_root: i64 [B] out. evict_mask: bool [B*n] out, true at the flat ids of every
            node that is not accepted (all n entries of every request written).
        finished: bool [B] out.

    Per request b (requests are independent; offsets are exclusive prefix sums over b):
    scan ``j = 0 .. accept_token_num[b]`` with ``t_j = predicts[accept_index[b, j]]``; the
    request finishes at the first j with ``t_j == eos_token_id`` (if >= 0) or ``seq_lens[b] +
    j + 1 >= max_seq_lens[b]``; ``accept_length[b]`` = that ``j + 1`` (else
    ``accept_token_num[b] + 1``). Then ``verified_id[off_b + j] = t_j`` and
    ``req_to_token[req, seq_lens[b] + j] = out_cache_loc[accept_index[b, j]]`` for ``j <
    accept_length[b]``, ``next_root[b] = t_{accept_length-1}``, ``evict_mask`` true on the
    request's other flat ids, ``seq_lens[b] += accept_length[b]``.

    Raises ``ValueError`` before any write for invalid scalars, dtypes, element counts,
    non-writable or non-contiguous outputs, ``accept_token_num`` outside ``0..S-1``, accepted
    flat ids that are not the request's own (root first, no repeats), negative tokens at
    them, ``req_pool_indices`` out of range or repeated, and ``seq_lens``/``max_seq_lens``
    outside ``0 <= seq_lens < max_seq_lens <= max_context_len``.
    """
    b_count = check_int("batch_size", batch_size, 0)
    n = check_int("num_draft_tokens", num_draft_tokens, 1)
    s = check_int("num_speculative_tokens", num_speculative_tokens, 1)
    ctx = check_int("max_context_len", max_context_len, 1)
    eos = check_int("eos_token_id", eos_token_id, -(2**63))
    acc_idx = in_view("accept_index", accept_index, (b_count, s), np.int32)
    acc_num = in_view("accept_token_num", accept_token_num, (b_count,), np.int32)
    # SGLang allocates predicts with one spare element (B*n + 1); it is not read.
    spare = isinstance(predicts, np.ndarray) and predicts.size == b_count * n + 1
    pred = in_view("predicts", predicts, (b_count * n + spare,), np.int32)[: b_count * n]
    cache_loc = in_view("out_cache_loc", out_cache_loc, (b_count * n,), np.int64)
    pool_idx = in_view("req_pool_indices", req_pool_indices, (b_count,), np.int64)
    max_lens = in_view("max_seq_lens", max_seq_lens, (b_count,), np.int64)
    if not isinstance(req_to_token, np.ndarray):
        raise ValueError(
            f"`req_to_token` must be a numpy array, not {type(req_to_token).__name__}"
        )
    if req_to_token.size % ctx:
        raise ValueError(
            f"`req_to_token` must have a multiple of `max_context_len` ({ctx}) elements, "
            f"not {req_to_token.size}"
        )
    rows = req_to_token.size // ctx
    seq = out_view("seq_lens", seq_lens, (b_count,), np.int64)
    table = out_view("req_to_token", req_to_token, (rows, ctx), np.int64)
    acc_len = out_view("accept_length", accept_length, (b_count,), np.int32)
    ver_id = out_view("verified_id", verified_id, (b_count * s,), np.int32)
    roots = out_view("next_root", next_root, (b_count,), np.int64)
    evict = out_view("evict_mask", evict_mask, (b_count * n,), np.bool_)
    done = out_view("finished", finished, (b_count,), np.bool_)
    check_index_range("accept_token_num", acc_num, 0, s, "`num_speculative_tokens`")
    check_index_range("req_pool_indices", pool_idx, 0, rows, "the rows of `req_to_token`")
    if len(np.unique(pool_idx)) != b_count:
        raise ValueError("`req_pool_indices` must be distinct")
    if b_count and (max_lens.min() < 1 or max_lens.max() > ctx):
        bad = max_lens[(max_lens < 1) | (max_lens > ctx)][0]
        raise ValueError(
            f"`max_seq_lens` values must be between 1 and `max_context_len` ({ctx}), not {bad}"
        )

    plans = [
        _request_plan(b, acc_idx[b].astype(np.int64), int(acc_num[b]) + 1, pred,
                      int(seq[b]), int(max_lens[b]), eos, n)
        for b in range(b_count)
    ]

    offset = 0
    for b, (ids, is_done) in enumerate(plans):
        length = len(ids)
        tokens = pred[ids]
        start = int(seq[b])
        acc_len[b] = length
        ver_id[offset : offset + length] = tokens
        roots[b] = tokens[-1]
        table[pool_idx[b], start : start + length] = cache_loc[ids]
        request = evict[b * n : (b + 1) * n]
        request[:] = True
        request[ids - b * n] = False
        done[b] = is_done
        seq[b] = start + length
        offset += length
