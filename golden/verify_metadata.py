"""P1 verify-forward metadata (docs/kernels.md §11), SGLang-style with page size 1.

What a tree-attention forward needs besides the verify tree: the KV slots of the round's new
tokens in ``req_to_token`` (the per-request map from sequence position to KV-cache slot, which
lives in card memory), the flattened KV index list and the index pointers of the queries, the
KV list and the masks. The ops follow the in-place ABI of §0 (argument names as SGLang's
Triton kernels); :func:`verify_forward_indptrs` returns the three pointer arrays of §11's
"Verify forward" line.
"""

import numpy as np

from ._abi import check_int, in_view, out_view
from .tree_mask import TreeMaskMode, packed_row_bytes

__all__ = ["assign_draft_cache_locs", "assign_req_to_token_pool", "compute_kv_indices",
           "verify_forward_indptrs", "mask_elements"]


def _pool_rows(req_to_token, req_pool_indices):
    """``(req_to_token [R, C], req_pool_indices [B], B)`` with the rows checked (the batch size
    is the length of ``req_pool_indices``)."""
    if not isinstance(req_to_token, np.ndarray) or req_to_token.ndim != 2:
        raise ValueError("`req_to_token` must be a 2-D numpy array [pool rows, context]")
    if not isinstance(req_pool_indices, np.ndarray) or req_pool_indices.ndim != 1:
        raise ValueError("`req_pool_indices` must be a 1-D numpy array [B]")
    batch_size = len(req_pool_indices)
    pools = in_view("req_pool_indices", req_pool_indices, (batch_size,), np.int64)
    rows = req_to_token.shape[0]
    if batch_size and (pools.min() < 0 or pools.max() >= rows):
        bad = pools[(pools < 0) | (pools >= rows)][0]
        raise ValueError(f"`req_pool_indices` must lie in 0..{rows - 1}, not {int(bad)}")
    return req_to_token, pools, batch_size


def _check_span(name, start, length, context):
    """Raise unless every ``start[b] .. start[b] + length[b] - 1`` lies in ``0 .. context-1``."""
    if np.any(start < 0) or np.any(length < 0):
        raise ValueError(f"`{name}` must be non-negative")
    if np.any(start + length > context):
        b = int(np.flatnonzero(start + length > context)[0])
        raise ValueError(f"`{name}` of request {b} ends at {int(start[b] + length[b])}, past "
                         f"the `req_to_token` row length {context}")


def assign_draft_cache_locs(req_to_token, req_pool_indices, seq_lens, out_cache_loc, S):
    """``req_to_token[req_pool_indices[b], seq_lens[b] + j] = out_cache_loc[b*S + j]`` for
    ``j < S``, in place (the KV slots of the round's drafted inputs).

    ``req_to_token`` i64 [R, C] in/out; ``req_pool_indices``, ``seq_lens`` i64 [B];
    ``out_cache_loc`` i64 [B*S]. Raises ``ValueError`` before any write.
    """
    s = check_int("S", S, 0)
    table, pools, b_count = _pool_rows(req_to_token, req_pool_indices)
    starts = in_view("seq_lens", seq_lens, (b_count,), np.int64)
    locs = in_view("out_cache_loc", out_cache_loc, (b_count, s), np.int64)
    _check_span("seq_lens", starts, np.full(b_count, s), table.shape[1])
    for b in range(b_count):
        table[pools[b], starts[b]:starts[b] + s] = locs[b]


def assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset,
                             out_cache_loc):
    """``req_to_token[req_pool_indices[b], start[b] + j] = out_cache_loc[sum_{r<b} (end[r] -
    start[r]) + j]`` for ``j < end[b] - start[b]``, in place.

    ``start_offset``, ``end_offset`` i64 [B] (``end >= start``); ``out_cache_loc`` i64 with
    exactly ``sum(end - start)`` elements. Raises ``ValueError`` before any write.
    """
    table, pools, b_count = _pool_rows(req_to_token, req_pool_indices)
    start = in_view("start_offset", start_offset, (b_count,), np.int64)
    end = in_view("end_offset", end_offset, (b_count,), np.int64)
    lengths = end - start
    _check_span("start_offset", start, lengths, table.shape[1])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    locs = in_view("out_cache_loc", out_cache_loc, (int(offsets[-1]),), np.int64)
    for b in range(b_count):
        table[pools[b], start[b]:end[b]] = locs[offsets[b]:offsets[b + 1]]


def compute_kv_indices(req_to_token, req_pool_indices, kv_start, kv_len, kv_indptr,
                       kv_indices):
    """``kv_indptr`` = exclusive prefix sum of ``kv_len`` (B+1 entries) and
    ``kv_indices[kv_indptr[b] + j] = req_to_token[req_pool_indices[b], kv_start[b] + j]``, in
    place.

    ``kv_start``, ``kv_len`` i64 [B]; ``kv_indptr`` i64 [B+1] out; ``kv_indices`` i64
    [sum(kv_len)] out. Raises ``ValueError`` before any write.
    """
    table, pools, b_count = _pool_rows(req_to_token, req_pool_indices)
    start = in_view("kv_start", kv_start, (b_count,), np.int64)
    length = in_view("kv_len", kv_len, (b_count,), np.int64)
    _check_span("kv_start", start, length, table.shape[1])
    indptr = out_view("kv_indptr", kv_indptr, (b_count + 1,), np.int64)
    total = int(length.sum())
    indices = out_view("kv_indices", kv_indices, (total,), np.int64)
    offsets = np.concatenate([[0], np.cumsum(length)])
    for b in range(b_count):
        indices[offsets[b]:offsets[b + 1]] = table[pools[b], start[b]:start[b] + length[b]]
    indptr[:] = offsets


def mask_elements(tree_mask_mode, seq_len, n) -> int:
    """Elements of one request's verify mask: ``n*(seq_len+n)`` bits FULL, ``n*n`` QLEN_ONLY,
    ``n*ceil(n/8)`` bytes BITPACKED."""
    mode = TreeMaskMode(tree_mask_mode)
    if mode == TreeMaskMode.FULL_MASK:
        return n * (int(seq_len) + n)
    if mode == TreeMaskMode.QLEN_ONLY:
        return n * n
    return n * packed_row_bytes(n)


def verify_forward_indptrs(seq_lens, n, tree_mask_mode):
    """``(qo_indptr, kv_indptr, mask_indptr)``, i64 [B+1] each: ``qo_indptr[b] = b*n``,
    ``kv_indptr`` the prefix sum of ``seq_lens[b] + n``, ``mask_indptr`` the prefix sum of
    :func:`mask_elements`."""
    seq_lens = np.asarray(seq_lens, np.int64)
    b_count = len(seq_lens)
    qo = np.arange(b_count + 1, dtype=np.int64) * n
    kv = np.concatenate([[0], np.cumsum(seq_lens + n)]).astype(np.int64)
    sizes = [mask_elements(tree_mask_mode, s, n) for s in seq_lens]
    mask = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    return qo, kv, mask
