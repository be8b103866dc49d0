"""sgl-kernel's speculative ops as drop-ins (docs/host.md, "Drop-in ops for SGLang").

An orchestration written against ``sgl_kernel`` imports these instead::

    from host.sgl_kernel import build_tree_kernel_efficient, verify_tree_greedy

Each op has sgl-kernel's name, its positional order and keyword names, writes its outputs in
place and returns ``None``. The tree ops take the tree arrays under both spellings sgl-kernel
has used, ``retrive_*`` (its op schema) and ``retrieve_*`` (SGLang's and newer sgl-kernel's
Python side). Arrays go through :mod:`host.arrays`: numpy, torch tensors (CPU in place,
other devices copied in and out) and anything with ``__dlpack__``/``__array__``; integer
arrays may be int32 or int64.

``backend`` (keyword only, per call) says what runs the op:

* ``"golden"`` (the default): the numpy goldens of ``golden/`` on the converted arrays.
* ``"rtl"``: the hardware where it has the op. ``tree_speculative_sampling_target_only`` and
  ``verify_tree_greedy`` run on K6 ``RejectSample`` (``hw.kernels.reject_sample``) as a
  Verilator model in this process (:mod:`host.k6_rtl`: one build per rounded shape, built on
  first use and cached under ``build/verilated/``), bit for bit the golden's outputs.
  ``build_tree_kernel_efficient``, ``reconstruct_indices_from_tree_mask`` and
  ``segment_packbits`` raise ``NotImplementedError`` saying why (:data:`RTL_MISSING`).

The sampling filters, the sampler and the two newer EAGLE helpers of :mod:`host.sgl_sampling`
are re-exported here, so that one module stands in for ``sgl_kernel``.

Every op raises ``ValueError`` before writing anything for bad input (the goldens' checks,
plus the adapter's; on ``"rtl"`` also a shape no K6 build takes), and writes its outputs
only after it succeeded.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

import golden

from .arrays import commit, exact_input, int_input, mask_input, output
from .checks import check_backend, check_choice, check_integer
from .sgl_sampling import (  # sgl-kernel's sampling ops and EAGLE helpers, re-exported
    process_accept_index_evict_mask_fused,
    top_k_renorm_prob,
    top_k_renorm_probs,
    top_k_top_p_sampling_from_probs,
    top_p_renorm_prob,
    top_p_renorm_probs,
    tree_speculative_sampling_target_only_rejmask,
)

__all__ = ["BACKENDS", "RTL_MISSING", "build_tree_kernel_efficient",
           "process_accept_index_evict_mask_fused", "reconstruct_indices_from_tree_mask",
           "segment_packbits", "top_k_renorm_prob", "top_k_renorm_probs",
           "top_k_top_p_sampling_from_probs", "top_p_renorm_prob", "top_p_renorm_probs",
           "tree_speculative_sampling_target_only",
           "tree_speculative_sampling_target_only_rejmask", "verify_tree_greedy"]

BACKENDS = ("golden", "rtl")

# Why the rtl backend does not run these ops (issue 33); the others run on K6 (host.k6_rtl).
RTL_MISSING = {
    "build_tree_kernel_efficient": "the hardware builds the verify tree only from its own "
    "draft round (the engine's build_verify); no kernel or command builds it from a "
    "caller's parent_list/selected_index",
    "reconstruct_indices_from_tree_mask": "the hardware builds the verify tree only from its "
    "own draft round; no kernel or command takes a caller's tree mask",
    "segment_packbits": "the hardware has no segment_packbits kernel (its mask is packed by "
    "the verify-tree build itself)",
}

# sgl-kernel's op schema spells the tree arrays ``retrive_*``; SGLang (and newer sgl-kernel
# Python wrappers) ``retrieve_*``. Both are accepted as keywords.
_SPELLINGS = {
    "retrieve_index": "retrive_index",
    "retrieve_next_token": "retrive_next_token",
    "retrieve_next_sibling": "retrive_next_sibling",
}


def _run_on(op_name, backend):
    """The module whose ``op_name`` runs the op on ``backend``: :mod:`golden`, or
    :mod:`host.k6_rtl` for ``"rtl"``; an op in :data:`RTL_MISSING` raises
    ``NotImplementedError`` on ``"rtl"``, any other backend ``ValueError``."""
    check_choice("backend", backend, BACKENDS)
    if backend == "rtl" and op_name not in RTL_MISSING:
        from . import k6_rtl  # Amaranth and the Verilator model: only when asked for

        return k6_rtl
    check_backend(__name__, op_name, backend, BACKENDS, RTL_MISSING)
    return golden


def _both_spellings(op):
    """Accept the ``retrieve_*`` keywords as the ``retrive_*`` arguments of ``op``."""

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        for new, old in _SPELLINGS.items():
            if new in kwargs:
                if old in kwargs:
                    raise TypeError(f"{op.__name__}() got both `{old}` and `{new}`")
                kwargs[old] = kwargs.pop(new)
        return op(*args, **kwargs)

    return wrapper


def _tree_outputs(predicts, accept_index, accept_token_num):
    """The three outputs both verify ops share, int32 as the goldens (and CUDA) write them."""
    return (output("predicts", predicts, "integer", np.int32),
            output("accept_index", accept_index, "integer", np.int32),
            output("accept_token_num", accept_token_num, "integer", np.int32))


def _tree_inputs(candidates, retrive_index, retrive_next_token, retrive_next_sibling):
    """The tree inputs both verify ops share, as the goldens' int64."""
    return (int_input("candidates", candidates),
            int_input("retrive_index", retrive_index),
            int_input("retrive_next_token", retrive_next_token),
            int_input("retrive_next_sibling", retrive_next_sibling))


# The draft_probs argument sits at position 10 (0-based); sgl-kernel's variant without it
# has threshold_single there.
_DRAFT_PROBS_POSITION = 10


def _without_draft_probs(op):
    """Let ``op`` be called positionally as sgl-kernel's variant without ``draft_probs``: a
    real number (a threshold) at ``draft_probs``'s position shifts the rest one place."""

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        if len(args) > _DRAFT_PROBS_POSITION and isinstance(
                args[_DRAFT_PROBS_POSITION], numbers.Real):
            args = args[:_DRAFT_PROBS_POSITION] + (None,) + args[_DRAFT_PROBS_POSITION:]
        return op(*args, **kwargs)

    return wrapper


@_both_spellings
@_without_draft_probs
def tree_speculative_sampling_target_only(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_samples_for_final_sampling,
    target_probs,
    draft_probs=None,
    threshold_single=1.0,
    threshold_acc=1.0,
    deterministic=True,
    *,
    backend="golden",
) -> None:
    """sgl-kernel ``tree_speculative_sampling_target_only``, in place: tree speculative
    sampling of :func:`golden.tree_speculative_sampling_target_only` (docs/kernels.md §8).

    Arguments, order and outputs as sgl-kernel's (both spellings of the ``retrive_*``
    keywords). ``draft_probs`` is optional: omitted (or None, or left out positionally as in
    sgl-kernel's variant without it), the rejected tokens' probabilities are dropped; given,
    its contents on entry are not read (``torch.empty_like`` is fine) and every element is
    written: the golden runs on a zero-filled array of its shape, copied into it afterwards
    (zeros except each rejected draft token's target probability at its parent's row).
    Integer arrays may be int32 or int64; ``uniform_samples``,
    ``uniform_samples_for_final_sampling``, ``target_probs`` and ``draft_probs`` float32.
    ``accept_token_num`` counts accepted draft tokens (root excluded), as sgl-kernel's.
    ``backend="rtl"``: the same outputs, bit for bit, from K6 on its Verilator model
    (:func:`host.k6_rtl.tree_speculative_sampling_target_only`).
    """
    ops = _run_on("tree_speculative_sampling_target_only", backend)
    outs = _tree_outputs(predicts, accept_index, accept_token_num)
    tree = _tree_inputs(candidates, retrive_index, retrive_next_token, retrive_next_sibling)
    coins = exact_input("uniform_samples", uniform_samples, np.float32)
    coin_final = exact_input("uniform_samples_for_final_sampling",
                             uniform_samples_for_final_sampling, np.float32)
    target = exact_input("target_probs", target_probs, np.float32)
    if draft_probs is None:
        draft_work = np.zeros(target.shape, np.float32)
        draft_outs = ()
    else:
        draft = output("draft_probs", draft_probs, np.float32, fill=0.0)
        draft_work, draft_outs = draft.work, (draft,)
    ops.tree_speculative_sampling_target_only(
        *(out.work for out in outs), *tree, coins, coin_final, target, draft_work,
        threshold_single, threshold_acc, deterministic)
    commit(*outs, *draft_outs)


@_both_spellings
def verify_tree_greedy(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
    *,
    backend="golden",
) -> None:
    """sgl-kernel ``verify_tree_greedy``, in place: :func:`golden.verify_tree_greedy`.

    Arguments, order and outputs as sgl-kernel's (both spellings of the ``retrive_*``
    keywords); integer arrays int32 or int64. ``backend="rtl"``: K6's greedy mode on its
    Verilator model (:func:`host.k6_rtl.verify_tree_greedy`).
    """
    ops = _run_on("verify_tree_greedy", backend)
    outs = _tree_outputs(predicts, accept_index, accept_token_num)
    tree = _tree_inputs(candidates, retrive_index, retrive_next_token, retrive_next_sibling)
    target = int_input("target_predict", target_predict)
    ops.verify_tree_greedy(*(out.work for out in outs), *tree, target)
    commit(*outs)


@_both_spellings
def build_tree_kernel_efficient(
    parent_list,
    selected_index,
    verified_seq_len,
    tree_mask,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    topk,
    depth,
    draft_token_num,
    tree_mask_mode,
    *,
    backend="golden",
) -> None:
    """sgl-kernel ``build_tree_kernel_efficient``, in place:
    :func:`golden.build_tree_kernel_efficient` (docs/kernels.md §6).

    Arguments, order and outputs as sgl-kernel's (both spellings of the ``retrive_*``
    keywords); ``parent_list``, ``selected_index``, ``verified_seq_len`` and the int outputs
    int32 or int64; ``tree_mask`` bool (modes 0, 1) or uint8/16/32 (mode 2), as SGLang
    allocates it; ``tree_mask_mode`` an int or SGLang's ``TreeMaskMode``. The retrieve links
    are read (SGLang fills them with -1) and written, as the CUDA kernel does.
    """
    _run_on("build_tree_kernel_efficient", backend)
    parents = int_input("parent_list", parent_list)
    selected = int_input("selected_index", selected_index)
    seq_lens = int_input("verified_seq_len", verified_seq_len)
    mask_out = output("tree_mask", tree_mask, "bool_or_integer")
    outs = (output("positions", positions, "integer", np.int64),
            output("retrive_index", retrive_index, "integer", np.int64),
            output("retrive_next_token", retrive_next_token, "integer", np.int64),
            output("retrive_next_sibling", retrive_next_sibling, "integer", np.int64))
    golden.build_tree_kernel_efficient(
        parents, selected, seq_lens, mask_out.work, *(out.work for out in outs), topk, depth,
        draft_token_num, tree_mask_mode)
    commit(mask_out, *outs)


def segment_packbits(x, input_indptr, output_indptr, y, batch_size, *, backend="golden"):
    """sgl-kernel ``segment_packbits``, in place: segment ``i`` of the bool array ``x``
    (``x[input_indptr[i]:input_indptr[i+1]]``) packed little-endian (bit ``j mod 8`` of byte
    ``j div 8``, :func:`golden.pack_tree_mask`) into ``y[output_indptr[i]:output_indptr[i+1]]``
    (uint8), for ``i < batch_size``; bytes of ``y`` outside the segments are not touched.

    ``input_indptr``/``output_indptr`` int32 or int64 with at least ``batch_size + 1``
    entries; each output segment must hold exactly ``ceil(len/8)`` bytes (sgl-kernel does not
    check it; a segment of another length is refused here). (sgl-kernel's CUDA stream
    argument is added inside its wrapper, not passed by the caller.)
    """
    _run_on("segment_packbits", backend)
    count = check_integer("batch_size", batch_size, 0)
    bits = exact_input("x", x, np.bool_)
    starts = int_input("input_indptr", input_indptr)
    ends = int_input("output_indptr", output_indptr)
    out = output("y", y, np.uint8)
    segments = _segments(bits, starts, ends, out.work, count)
    for (lo, hi), (out_lo, out_hi) in segments:
        out.work[out_lo:out_hi] = golden.pack_tree_mask(bits[lo:hi])
    commit(out)


def _segments(bits, starts, ends, y, count):
    """The ``count`` segments' ``((lo, hi), (out_lo, out_hi))`` of :func:`segment_packbits`,
    checked: 1-D arrays, pointers that do not decrease, segments inside ``x`` and ``y``, and
    each output ``ceil(len/8)`` bytes long."""
    for name, array in (("x", bits), ("input_indptr", starts), ("output_indptr", ends),
                        ("y", y)):
        if array.ndim != 1:
            raise ValueError(f"`{name}` must be 1-D, not of shape {array.shape}")
    for name, pointers, size in (("input_indptr", starts, bits.size),
                                 ("output_indptr", ends, y.size)):
        if pointers.size < count + 1:
            raise ValueError(f"`{name}` must have at least `batch_size` + 1 = {count + 1} "
                             f"entries, not {pointers.size}")
        used = pointers[:count + 1]
        if count and (used[0] < 0 or (np.diff(used) < 0).any() or used[-1] > size):
            raise ValueError(f"`{name}` must rise from 0 or more to at most {size}, not "
                             f"{used.tolist()}")
    segments = []
    for i in range(count):
        lo, hi, out_lo, out_hi = (int(starts[i]), int(starts[i + 1]), int(ends[i]),
                                  int(ends[i + 1]))
        if out_hi - out_lo != (hi - lo + 7) // 8:
            raise ValueError(f"segment {i}: `output_indptr` gives {out_hi - out_lo} bytes for "
                             f"{hi - lo} bits; it must be ceil({hi - lo}/8) = "
                             f"{(hi - lo + 7) // 8}")
        segments.append(((lo, hi), (out_lo, out_hi)))
    return segments


def _mask_parents(tree, b):
    """Parent position of each position of request ``b``'s ``[n, n]`` tree mask, as the CUDA
    kernel reads it: the last true column before the diagonal (-1 for position 0). A row
    i >= 1 with no true column before i is refused (it has no root)."""
    n = tree.shape[0]
    parents = np.full(n, -1, np.int64)
    for i in range(1, n):
        before = np.flatnonzero(tree[i, :i])
        if before.size == 0:
            raise ValueError(f"`tree_mask`: request {b}, row {i} has no true column before "
                             "its own (column 0, the root, must be true)")
        parents[i] = before[-1]
    return parents


def _sglang_tree_encoding(parents):
    """``(parent_list, selected_index)`` of ``build_tree_kernel_efficient`` with ``topk = n``,
    ``depth = 2`` that describe the tree ``parents`` (position p's parent, p >= 1): position
    i is flat ``score_list`` index ``i`` under the root, else ``p*n + i`` (block p, whose
    parent entry is position p's index)."""
    n = parents.size
    codes = np.array([i if parents[i] <= 0 else parents[i] * n + i for i in range(n)],
                     np.int64)
    parent_list = np.full(n + 1, -1, np.int64)
    parent_list[1:n] = codes[1:]
    return parent_list, codes[1:]


@_both_spellings
def reconstruct_indices_from_tree_mask(
    tree_mask,
    verified_seq_len,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    batch_size,
    draft_token_num,
    *,
    backend="golden",
) -> None:
    """sgl-kernel ``reconstruct_indices_from_tree_mask``, in place: the positions and
    retrieve arrays of the trees given as ``[batch_size, n, n]`` masks (``n =
    draft_token_num``; bool, or uint8 bytes).

    Each row's parent is the last true column before its diagonal (as the CUDA kernel reads
    it); the op then runs :func:`golden.build_tree_kernel_efficient` on that tree (encoded as
    ``topk = n``, ``depth = 2``) and writes its outputs: ``positions = seq_len + depth``,
    ``retrive_index = b*n + i``, first child and next sibling in ascending position, -1 for
    none (every element written). Strict where the CUDA kernel is not: the mask must be
    exactly the tree's (row i true at i, the root and every ancestor, nothing else), or the op
    raises ``ValueError`` before writing anything. Integer arrays int32 or int64.
    """
    _run_on("reconstruct_indices_from_tree_mask", backend)
    count = check_integer("batch_size", batch_size, 0)
    n = check_integer("draft_token_num", draft_token_num, 1)
    bits = mask_input("tree_mask", tree_mask)
    if bits.size != count * n * n:
        raise ValueError(f"`tree_mask` must have `batch_size` * `draft_token_num`**2 = "
                         f"{count * n * n} elements, not {bits.size}")
    seq_lens = int_input("verified_seq_len", verified_seq_len)
    if seq_lens.size != count:
        raise ValueError(f"`verified_seq_len` must have `batch_size` = {count} elements, not "
                         f"{seq_lens.size}")
    outs = (output("positions", positions, "integer", np.int64, fill=0),
            output("retrive_index", retrive_index, "integer", np.int64, fill=-1),
            output("retrive_next_token", retrive_next_token, "integer", np.int64, fill=-1),
            output("retrive_next_sibling", retrive_next_sibling, "integer", np.int64, fill=-1))
    trees = bits.reshape(count, n, n)
    encoded = [_sglang_tree_encoding(_mask_parents(trees[b], b)) for b in range(count)]
    parent_list = np.array([e[0] for e in encoded], np.int64).reshape(count, n + 1)
    selected = np.array([e[1] for e in encoded], np.int64).reshape(count, n - 1)
    rebuilt = np.zeros(count * n * n, np.bool_)
    golden.build_tree_kernel_efficient(
        parent_list, selected, seq_lens, rebuilt, *(out.work for out in outs), n, 2, n,
        golden.TreeMaskMode.QLEN_ONLY)
    wrong = np.flatnonzero((rebuilt != bits.reshape(-1)).reshape(count * n, n).any(axis=1))
    if wrong.size:
        b, row = divmod(int(wrong[0]), n)
        raise ValueError(f"`tree_mask`: request {b}, row {row} is not its tree's ancestor row "
                         "(true at the row itself, the root and every ancestor only)")
    commit(*outs)
