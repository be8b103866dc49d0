"""FlashInfer's top-k / top-p filters on probability rows, as sgl-kernel exports them, and two
sgl-kernel EAGLE helpers, as numpy goldens (issue 33; docs/host.md, "Drop-in ops for SGLang").

Each op takes the arguments of the sgl-kernel op it mirrors (the ``torch.ops.sgl_kernel``
schema, whose outputs are arguments), in the same order, writes its outputs in place and
returns ``None``; every check runs before the first write (``ValueError`` naming the
argument).

**The filters** (``top_k_renorm_probs``, ``top_p_renorm_probs``,
``top_k_top_p_sampling_from_probs``). Upstream (FlashInfer ``include/flashinfer/sampling.cuh``,
``TopKRenormProbKernel``, ``TopPRenormProbKernel``, ``TopKTopPSamplingFromProbKernel``, at
9220fb34, a commit sgl-kernel pinned in 2025) finds its thresholds by a float32 pivot search
with block reductions in thread order; the kept sets it converges to are whole tie groups.
The goldens define that reading exactly and sequentially. Per row ``x`` (float32 ``[V]``, values in
``[0, 1]``):

* the *sorted order* is the row by value descending, ties by ascending index; ``mass_above(i)``
  is the float32 sum, left to right in the sorted order, of the values strictly greater than
  ``x[i]`` (``np.add.accumulate``); ``count_above(i)`` their number;
* top-k ``k`` keeps ``i`` iff ``count_above(i) < k`` (every token at least as probable as the
  k-th largest: ties at the threshold are kept); ``k <= 0`` or ``k >= V`` is off;
* top-p ``p`` keeps ``i`` iff ``mass_above(i) < p`` or ``x[i]`` is the row's largest value
  (``p = 0`` keeps the most probable tokens); ``p = 1`` is off;
* a token of probability 0 (or -0.0) is never kept; the kept tokens are a prefix of the
  sorted order, and the kept mass ``S`` is the running sum at its last token;
* renormalised: ``x[i] / S`` (one correctly rounded float32 division; FlashInfer multiplies by
  an approximate reciprocal) for kept tokens, +0.0 elsewhere. A filter that is off copies the
  row unchanged (bit for bit; FlashInfer's top-k does the same for ``k >= V``). A row with no
  positive value renormalises to zeros. Every other kept set is renormalised (FlashInfer's
  pivot search leaves a top-k row with fewer than k positive tokens unnormalised).

**Sampling** draws one token per output row ``b`` from row ``indices[b]`` (``b`` without
indices) with one coin ``uniform_samples[b]`` in ``[0, 1]``, where FlashInfer draws philox
numbers inside its rejection loop (no bit-exact match is possible): the kept tokens' weights
``w`` (the filtered row, zeros elsewhere) are sampled by inverse CDF in token order, ``u =
coin * T`` with ``T`` the float32 left-to-right sum of ``w``; the sample is the first token
with ``w > 0`` whose float32 prefix sum exceeds ``u``, else (``coin`` near 1) the last token
with ``w > 0`` (sgl-kernel's ``last_valid_id``). ``filter_apply_order="joint"`` (the op) keeps
the tokens both filters keep on the row; ``"top_k_first"`` (sgl-kernel's Python default)
renormalises by top-k first and applies top-p to the renormalised row.

The parameter arrays (``maybe_top_k_arr``, ``maybe_top_p_arr``) hold one value per *row of
probs*, as the kernels read them (``top_k_arr[row_idx]``); ``None`` selects the scalar.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._abi import check_index_range, in_view, out_view
from .reject_sample import _tree_views, tree_speculative_sampling_target_only

__all__ = [
    "FILTER_APPLY_ORDERS",
    "REJMASK_MAX_CHILDREN",
    "check_rejmask_tree",
    "top_k_renorm_probs",
    "top_p_renorm_probs",
    "top_k_top_p_sampling_from_probs",
    "tree_speculative_sampling_target_only_rejmask",
    "process_accept_index_evict_mask_fused",
]

FILTER_APPLY_ORDERS = ("top_k_first", "joint")
# sgl-kernel's rejection-mask kernel is defined (and tested against the draft_probs kernel)
# for trees of at most this many children per node.
REJMASK_MAX_CHILDREN = 4


# --- argument checks -------------------------------------------------------------------------


def _probability_rows(name, probs) -> np.ndarray:
    """A float32 [rows, V] array (V >= 1) of values in [0, 1], no NaN."""
    if not isinstance(probs, np.ndarray) or probs.ndim != 2 or probs.dtype != np.float32:
        got = (f"{probs.dtype} of shape {probs.shape}" if isinstance(probs, np.ndarray)
               else type(probs).__name__)
        raise ValueError(f"`{name}` must be a float32 numpy array [batch, V], not {got}")
    if probs.shape[1] < 1:
        raise ValueError(f"`{name}` must have a vocabulary dimension V >= 1")
    bad = ~((probs >= 0) & (probs <= 1))  # NaN fails both
    if bad.any():
        raise ValueError(f"`{name}` values must be probabilities between 0 and 1, not "
                         f"{probs[bad][0]}")
    return probs


def _scalar(name, value, integral):
    """A Python int (``integral``) or float, refusing bools, NaN and other types."""
    kind = numbers.Integral if integral else numbers.Real
    if isinstance(value, bool | np.bool_) or not isinstance(value, kind):
        raise ValueError(f"`{name}` must be {'an integer' if integral else 'a real number'}, "
                         f"not {value!r}")
    return int(value) if integral else float(value)


def _top_k_values(maybe_top_k_arr, top_k_val, rows) -> np.ndarray:
    """Each row's k (int64 [rows]): the int32 array, else the scalar for every row."""
    if maybe_top_k_arr is None:
        return np.full(rows, _scalar("top_k_val", top_k_val, True), np.int64)
    return in_view("maybe_top_k_arr", maybe_top_k_arr, (rows,), np.int32).astype(np.int64)


def _top_p_values(maybe_top_p_arr, top_p_val, rows) -> np.ndarray:
    """Each row's p (float32 [rows], in [0, 1]): the float32 array, else the scalar rounded
    to float32 (the kernels' ``float top_p_val``)."""
    if maybe_top_p_arr is None:
        values = np.full(rows, np.float32(_scalar("top_p_val", top_p_val, False)))
        name = "top_p_val"
    else:
        values = in_view("maybe_top_p_arr", maybe_top_p_arr, (rows,), np.float32)
        name = "maybe_top_p_arr"
    bad = ~((values >= 0) & (values <= 1))
    if bad.any():
        raise ValueError(f"`{name}` must be between 0 and 1, not {values[bad][0]}")
    return values


def _check_bool(name, value) -> None:
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"`{name}` must be a bool, not {value!r}")


# --- the filters on one row --------------------------------------------------------------------


def _kept(row, k, p):
    """``(order, values, mass, m)``: the row's sorted order, its values and float32 running
    sums in that order, and the number ``m`` of leading tokens that top-k ``k`` and top-p
    ``p`` keep (see the module docstring)."""
    size = row.size
    order = np.lexsort((np.arange(size), -row))  # value descending, ties by index
    values = row[order]
    mass = np.add.accumulate(values)  # float32, strictly left to right
    first = np.ones(size, np.bool_)
    first[1:] = values[1:] != values[:-1]
    starts = np.maximum.accumulate(np.where(first, np.arange(size), 0))  # tie-group start
    keep = values > 0
    if 0 < k < size:
        keep &= starts < k
    if p < 1:
        above = np.where(starts > 0, mass[starts - 1], np.float32(0))
        keep &= (above < p) | (starts == 0)
    return order, values, mass, int(np.count_nonzero(keep))


def _renormalised(row, k, p) -> np.ndarray:
    """The row filtered by top-k ``k`` and top-p ``p`` and renormalised (a copy when both are
    off)."""
    if not (0 < k < row.size) and p >= 1:
        return row.copy()
    order, values, mass, m = _kept(row, k, p)
    out = np.zeros(row.size, np.float32)
    if m:
        out[order[:m]] = values[:m] / mass[m - 1]
    return out


def _weights(row, k, p, order_name) -> np.ndarray:
    """The sampling weights of one row: the kept tokens' values (renormalised by top-k first
    when ``order_name`` is ``"top_k_first"``), zeros elsewhere."""
    if order_name == "top_k_first":
        row, k = _renormalised(row, k, np.float32(1)), 0
    order, values, _mass, m = _kept(row, k, p)
    weights = np.zeros(row.size, np.float32)
    weights[order[:m]] = values[:m]
    return weights


def _inverse_cdf(weights, coin) -> int:
    """First token with weight > 0 whose float32 prefix sum exceeds ``coin * total``; else the
    last token with weight > 0 (the caller ensures there is one)."""
    prefix = np.add.accumulate(weights)  # float32, strictly left to right
    u = np.float32(coin) * prefix[-1]
    positive = weights > 0
    hit = positive & (prefix > u)
    if hit.any():
        return int(hit.argmax())
    return weights.size - 1 - int(positive[::-1].argmax())


# --- renormalisation ---------------------------------------------------------------------------


def _renorm(probs, renorm_probs, ks, ps) -> None:
    rows = probs.shape[0]
    out = out_view("renorm_probs", renorm_probs, probs.shape, np.float32)
    results = [_renormalised(probs[r], ks[r], ps[r]) for r in range(rows)]
    for r, result in enumerate(results):
        out[r] = result


def top_k_renorm_probs(probs, renorm_probs, maybe_top_k_arr, top_k_val) -> None:
    """sgl-kernel ``top_k_renorm_probs`` (FlashInfer ``top_k_renorm_probs``), in place: each
    row of ``probs`` keeps its tokens at least as probable as its k-th largest (ties kept) and
    is renormalised into ``renorm_probs``; ``k <= 0`` or ``k >= V`` copies the row.

    Parameters:
        probs: in, float32 [batch, V], values in [0, 1].
        renorm_probs: out, float32, ``probs``' shape (every element written).
        maybe_top_k_arr: None, or int32 [batch] (one k per row).
        top_k_val: int, the k of every row when ``maybe_top_k_arr`` is None (else ignored).

    Exact reading of FlashInfer's pivot search: see the module docstring.
    """
    probs = _probability_rows("probs", probs)
    ks = _top_k_values(maybe_top_k_arr, top_k_val, probs.shape[0])
    _renorm(probs, renorm_probs, ks, np.ones(probs.shape[0], np.float32))


def top_p_renorm_probs(probs, renorm_probs, maybe_top_p_arr, top_p_val) -> None:
    """sgl-kernel ``top_p_renorm_probs`` (FlashInfer ``top_p_renorm_probs``), in place: each
    row of ``probs`` keeps its most probable tokens, whole tie groups, until their mass reaches
    ``p`` (a token is kept iff the mass strictly above it is below ``p``), renormalised into
    ``renorm_probs``; ``p = 1`` copies the row.

    Parameters:
        probs: in, float32 [batch, V], values in [0, 1].
        renorm_probs: out, float32, ``probs``' shape (every element written).
        maybe_top_p_arr: None, or float32 [batch] in [0, 1] (one p per row).
        top_p_val: real in [0, 1], the p of every row when ``maybe_top_p_arr`` is None.

    Exact reading of FlashInfer's pivot search: see the module docstring.
    """
    probs = _probability_rows("probs", probs)
    ps = _top_p_values(maybe_top_p_arr, top_p_val, probs.shape[0])
    _renorm(probs, renorm_probs, np.zeros(probs.shape[0], np.int64), ps)


# --- sampling ----------------------------------------------------------------------------------


def _sample_indices(indices, rows):
    """``(row of each output, batch)``: ``indices`` (int32 or int64 [batch], values in
    ``[0, rows)``), or every row once."""
    if indices is None:
        return np.arange(rows), rows
    if not isinstance(indices, np.ndarray) or indices.dtype not in (np.int32, np.int64) \
            or indices.ndim != 1:
        raise ValueError("`indices` must be None or a 1-D int32 or int64 numpy array")
    check_index_range("indices", indices, 0, rows, "the rows of `probs`")
    return indices.astype(np.int64), indices.size


def top_k_top_p_sampling_from_probs(probs, samples, indices, maybe_top_k_arr, top_k_val,
                                    maybe_top_p_arr, top_p_val, deterministic,
                                    uniform_samples, *, filter_apply_order="joint") -> None:
    """sgl-kernel ``top_k_top_p_sampling_from_probs`` (FlashInfer
    ``TopKTopPSamplingFromProbKernel``), in place: one token per output row, sampled from the
    tokens top-k and top-p keep, with an explicit coin.

    Parameters (the op's order; the coins take the slot of its ``generator``):
        probs: in, float32 [rows, V], values in [0, 1].
        samples: out, int32 [batch]: the sampled token ids.
        indices: None (batch = rows, output b samples row b), or int32/int64 [batch] in
            ``[0, rows)``: output b samples row ``indices[b]``.
        maybe_top_k_arr, top_k_val: int32 [rows] or None and the scalar k (as
            :func:`top_k_renorm_probs`; ``k <= 0`` or ``k >= V``: off).
        maybe_top_p_arr, top_p_val: float32 [rows] or None and the scalar p in [0, 1]
            (as :func:`top_p_renorm_probs`; 1: off).
        deterministic: bool, accepted for compatibility (the sums are always sequential).
        uniform_samples: in, float32 [batch] (or [batch, 1]) in [0, 1]: output b's coin.
        filter_apply_order: ``"joint"`` (the op: both filters on the row) or
            ``"top_k_first"`` (sgl-kernel's Python default: top-k renormalisation, then top-p
            on the renormalised row).

    A row with no positive probability has nothing to sample: ``ValueError`` (FlashInfer
    returns an undefined token or reports the row invalid).
    """
    probs = _probability_rows("probs", probs)
    rows = probs.shape[0]
    source, batch = _sample_indices(indices, rows)
    out = out_view("samples", samples, (batch,), np.int32)
    ks = _top_k_values(maybe_top_k_arr, top_k_val, rows)
    ps = _top_p_values(maybe_top_p_arr, top_p_val, rows)
    _check_bool("deterministic", deterministic)
    coins = in_view("uniform_samples", uniform_samples, (batch,), np.float32)
    bad = ~((coins >= 0) & (coins <= 1))
    if bad.any():
        raise ValueError(f"`uniform_samples` must be between 0 and 1, not {coins[bad][0]}")
    if filter_apply_order not in FILTER_APPLY_ORDERS:
        raise ValueError(f"`filter_apply_order` must be one of {', '.join(FILTER_APPLY_ORDERS)}"
                         f", not {filter_apply_order!r}")
    empty = [int(r) for r in np.unique(source) if not (probs[r] > 0).any()]
    if empty:
        raise ValueError(f"`probs` row {empty[0]} has no positive probability to sample from")
    weights = {int(r): _weights(probs[r], ks[r], ps[r], filter_apply_order)
               for r in np.unique(source)}
    tokens = [_inverse_cdf(weights[int(r)], coins[b]) for b, r in enumerate(source)]
    out[:] = tokens


# --- sgl-kernel's rejection-mask tree sampler --------------------------------------------------


def _check_fan_out(v, b, n) -> None:
    """Every node of every request has at most :data:`REJMASK_MAX_CHILDREN` children (its
    child list, ``retrive_next_token`` then ``retrive_next_sibling``, ends within n)."""
    nxt, sib = v["retrive_next_token"], v["retrive_next_sibling"]
    for req in range(b):
        for node in range(n):
            child, count = int(nxt[req, node]), 0
            while child != -1:
                count += 1
                if count > n:
                    raise ValueError(f"`retrive_next_sibling` of request {req} has a cycle (a "
                                     f"sibling walk longer than n = {n})")
                child = int(sib[req, child])
            if count > REJMASK_MAX_CHILDREN:
                raise ValueError(
                    f"`retrive_next_token`: request {req}, position {node} has {count} "
                    f"children; the rejection-mask kernel takes at most {REJMASK_MAX_CHILDREN} "
                    "(use tree_speculative_sampling_target_only)")


def tree_speculative_sampling_target_only_rejmask(
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        threshold_single=1.0, threshold_acc=1.0, deterministic=True) -> None:
    """sgl-kernel ``tree_speculative_sampling_target_only_rejmask`` (sgl-project/sglang
    PR 15687, ``sgl-kernel/tests/speculative/test_speculative_sampling.py``), in place.

    Not a different sampler: the draft_probs-free variant of
    :func:`golden.tree_speculative_sampling_target_only` for trees of at most
    :data:`REJMASK_MAX_CHILDREN` children per node. Where that kernel records each rejected
    draft's target probability ``q`` in ``draft_probs`` and draws the final token from
    ``relu(target - draft_probs)`` of the last accepted row, this one masks the tokens rejected
    at that row; ``q - q`` is exactly 0, so the outputs are the same bit for bit (upstream's
    tests assert equality for every tree of fan-out <= 4). The golden runs
    :func:`golden.tree_speculative_sampling_target_only` on a zero scratch ``draft_probs`` —
    so the project's ``q > 0`` acceptance guard (docs/decisions.md, "Zero-probability tokens")
    holds here too.

    Parameters: those of :func:`golden.tree_speculative_sampling_target_only` without
    ``draft_probs``. A node with more than :data:`REJMASK_MAX_CHILDREN` children is refused
    (``ValueError``): upstream defines and tests the mask for ``topk <= 4`` only.
    """
    check_rejmask_tree(predicts, accept_index, accept_token_num, candidates, retrive_index,
                       retrive_next_token, retrive_next_sibling, target_probs)
    arguments = (predicts, accept_index, accept_token_num, candidates, retrive_index,
                 retrive_next_token, retrive_next_sibling, uniform_samples,
                 uniform_samples_for_final_sampling, target_probs)
    tree_speculative_sampling_target_only(*arguments, np.zeros(target_probs.shape, np.float32),
                                          threshold_single, threshold_acc, deterministic)


def check_rejmask_tree(predicts, accept_index, accept_token_num, candidates, retrive_index,
                       retrive_next_token, retrive_next_sibling, target_probs) -> None:
    """What :func:`tree_speculative_sampling_target_only_rejmask` checks beyond
    ``tree_speculative_sampling_target_only`` (``ValueError``): the tree arrays, a
    ``target_probs`` array, at most :data:`REJMASK_MAX_CHILDREN` children per node."""
    v, b, n, _s = _tree_views(predicts, accept_index, accept_token_num, candidates,
                              retrive_index, retrive_next_token, retrive_next_sibling)
    if not isinstance(target_probs, np.ndarray) or target_probs.ndim not in (2, 3):
        raise ValueError("`target_probs` must be a numpy array [B, n, V] or [B*n, V]")
    _check_fan_out(v, b, n)


# --- sgl-kernel's fused accept-index compaction ------------------------------------------------


def process_accept_index_evict_mask_fused(accept_index, predict, accept_length, verified_id,
                                          evict_mask, filtered_accept_index,
                                          output_size) -> None:
    """sgl-kernel ``process_accept_index_evict_mask_fused`` (``ProcessAcceptIndexKernel`` in
    ``sgl-kernel/csrc/speculative/eagle_utils.cu``; sgl-project/sglang PR 6810), in place: the
    fused form of SGLang's EAGLE verify bookkeeping

        accept_length = (accept_index != -1).sum(dim=1) - 1
        accept_index = accept_index[accept_index != -1]
        verified_id = predict[accept_index]
        evict_mask = full(True); evict_mask[accept_index] = False

    Parameters:
        accept_index: in, int32 [bs, S]: flat draft-token ids, -1 for none; every entry that
            is not -1 counts (not only a leading run), in row-major order.
        predict: in, int32 [T] (T = total draft tokens): the token of each flat id.
        accept_length: out, int32 [bs]: entries that are not -1, minus one (-1 for a row of
            none).
        verified_id: out, int32 (any shape, read flat) with at least ``output_size`` elements:
            ``predict`` of each entry, compacted; elements past ``output_size`` untouched.
        evict_mask: out, bool [T]: False at every entry, True elsewhere (every element
            written).
        filtered_accept_index: out, int32 like ``verified_id``: the entries, compacted.
        output_size: out, int32 [1]: the number of entries.

    Stricter than the CUDA kernel, which skips an entry outside ``[0, T)`` but counts it, and
    writes compacted positions only below T (not the outputs' size): entries must be -1 or in
    ``[0, T)``, and ``verified_id``/``filtered_accept_index`` must hold every entry. The CUDA
    kernel also sets ``evict_mask`` to True from block 0 while other blocks clear it (a race);
    the golden gives the intended result.
    """
    if not isinstance(accept_index, np.ndarray) or accept_index.ndim != 2:
        raise ValueError("`accept_index` must be a 2-D numpy array [bs, S]")
    if not isinstance(predict, np.ndarray) or predict.ndim != 1:
        raise ValueError("`predict` must be a 1-D numpy array [T]")
    bs, total = accept_index.shape[0], predict.size
    index = in_view("accept_index", accept_index, accept_index.shape, np.int32)
    tokens = in_view("predict", predict, (total,), np.int32)
    length = out_view("accept_length", accept_length, (bs,), np.int32)
    mask = out_view("evict_mask", evict_mask, (total,), np.bool_)
    size = out_view("output_size", output_size, (1,), np.int32)
    for name, array in (("verified_id", verified_id),
                        ("filtered_accept_index", filtered_accept_index)):
        if not isinstance(array, np.ndarray):
            raise ValueError(f"`{name}` must be a numpy array, not {type(array).__name__}")
    ids = out_view("verified_id", verified_id, (verified_id.size,), np.int32)
    kept = out_view("filtered_accept_index", filtered_accept_index,
                    (filtered_accept_index.size,), np.int32)
    bad = (index != -1) & ((index < 0) | (index >= total))
    if bad.any():
        raise ValueError(f"`accept_index` values must be -1 or between 0 and {total - 1} "
                         f"(the size of `predict` - 1), not {index[bad][0]}")
    entries = index[index != -1]  # row-major
    for name, array in (("verified_id", ids), ("filtered_accept_index", kept)):
        if array.size < entries.size:
            raise ValueError(f"`{name}` must hold the {entries.size} accepted entries, not "
                             f"{array.size}")
    counts = (index != -1).sum(axis=1)

    length[:] = counts - 1  # -1 for a row with no entry
    ids[:entries.size] = tokens[entries]
    kept[:entries.size] = entries
    mask[:] = True
    mask[entries] = False
    size[0] = entries.size
