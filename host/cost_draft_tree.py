"""The CostDraftTree extension's ops as drop-ins (docs/host.md, "Drop-in ops for SGLang").

An orchestration written against the CostDraftTree CUDA extension imports these instead::

    from host.cost_draft_tree import draft_tree_layer_score_index_gen_op, update_verify_result

Each op has the extension's name and the golden's signature (which follows the extension's
ABI, docs/kernels.md): the same positional order and keyword names, outputs written in place,
``None`` returned. Arrays go through :mod:`host.arrays` (numpy, torch tensors: CPU in place,
other devices copied in and out, anything with ``__dlpack__``/``__array__``); integer arrays
may be int32 or int64 (any integer dtype), handed to the golden in its dtype; float and bool
arrays must have the golden's dtype. Outputs are computed into working copies that start
from the caller's contents (elements an op does not write keep their values) and are written
back only after the op succeeded, so an op that raises leaves every output unchanged.

``backend`` (keyword only, per call): ``"golden"`` (the default) runs the numpy golden of the
same name; ``"rtl"`` raises ``NotImplementedError`` naming what is missing
(:data:`RTL_MISSING`).
"""

from __future__ import annotations

import inspect

import numpy as np

import golden
from golden import verify_metadata

from .arrays import Output, commit, exact_input, host_array, int_input, output
from .checks import check_backend

__all__ = ["BACKENDS", "RTL_MISSING", "assign_draft_cache_locs", "assign_req_to_token_pool",
           "calculate_work_deltas", "compute_kv_indices", "convert_logits_to_probas",
           "draft_tree_layer_score_index_gen_op", "draft_tree_reject_sample",
           "fused_tree_mask_operator", "update_cumu_draft_state", "update_verify_result"]

BACKENDS = ("golden", "rtl")

_PER_OP_COMMAND = ("the hardware runs this kernel only inside the engine's draft round and "
                   "verify commands; a command that runs it alone on the caller's arrays is "
                   "missing")
_NO_KERNEL = ("the hardware has no kernel for it (the engine keeps its KV bookkeeping in the "
              "host)")

# What the rtl backend of each op still needs (issue 33).
RTL_MISSING = {
    "draft_tree_layer_score_index_gen_op": _PER_OP_COMMAND,
    "update_cumu_draft_state": _PER_OP_COMMAND,
    "calculate_work_deltas": _PER_OP_COMMAND,
    "fused_tree_mask_operator": _PER_OP_COMMAND,
    "convert_logits_to_probas": _PER_OP_COMMAND,
    "draft_tree_reject_sample": _PER_OP_COMMAND + " (and one that loads a caller-built tree)",
    "update_verify_result": _PER_OP_COMMAND,
    "compute_kv_indices": _NO_KERNEL,
    "assign_draft_cache_locs": _NO_KERNEL,
    "assign_req_to_token_pool": _NO_KERNEL,
}

# How each array argument reaches the golden: ("int", dtype) an integer input (int32 or
# int64) converted to ``dtype``; ("exact", dtype) an input of exactly ``dtype``; ("rows",
# dtype) one of exactly ``dtype`` with a value per request, [B] or SGLang's [B, 1], as [B];
# ("any",) an input passed as the caller's dtype (the golden checks it); ("out", gate, dtype)
# an output (``gate``: the caller's allowed dtypes, "integer" or a dtype; ``dtype``: the
# golden's, None for the caller's); ("out_same",) an output of the caller's dtype, whatever
# it is.
I64 = ("int", np.int64)
I32 = ("int", np.int32)
F32 = ("exact", np.float32)
BOOL = ("exact", np.bool_)
ANY = ("any",)
OUT_I64 = ("out", "integer", np.int64)
OUT_I32 = ("out", "integer", np.int32)
OUT_F32 = ("out", np.float32, np.float32)
OUT_BOOL = ("out", np.bool_, np.bool_)
ROWS_F32 = ("rows", np.float32)  # exactly float32, one per request: [B] or SGLang's [B, 1]
OUT_MASK = ("out", "bool_or_integer", None)
OUT_SAME = ("out_same",)

_CUMU_TREE = {"cumu_tokens": I64, "cumu_scores": F32, "cumu_deltas": I64,
              "prev_indexs": I64, "next_indexs": I64, "side_indexs": I64}


def _outputs(arrays):
    """``arrays`` with every entry turned into its output form (in/out arguments)."""
    as_out = {I64: OUT_I64, I32: OUT_I32, F32: OUT_F32, BOOL: OUT_BOOL}
    return {name: as_out[spec] for name, spec in arrays.items()}


_ARRAYS = {
    "draft_tree_layer_score_index_gen_op": {
        "topk_probas_sampling": F32, "topk_tokens_sampling": OUT_I64,
        "last_layer_scores": F32, "curr_layer_scores": OUT_F32, "sort_layer_scores": OUT_F32,
        "sort_layer_indices": OUT_I64, "cache_topk_indices": OUT_I64,
        "parent_indices_in_layer": OUT_I64, "input_hidden_states": ANY,
        "output_hidden_states": OUT_SAME, "hot_token_id": I64},
    "update_cumu_draft_state": {
        "topk_probas": F32, "topk_tokens": I64, "sorted_scores": F32, "sorted_indexs": I64,
        "parent_indexs": I64, "topk_indexs": I64, "input_tree_mask": BOOL,
        **_outputs(_CUMU_TREE), "output_scores": OUT_F32, "output_tokens": OUT_I64,
        "work_scores": OUT_F32, "sort_scores": OUT_F32, "output_tree_mask": OUT_BOOL},
    "calculate_work_deltas": {"work_scores": F32, "work_deltas": OUT_F32},
    "fused_tree_mask_operator": {
        **_CUMU_TREE, "seq_lens": I64, "tree_mask": OUT_MASK, "positions": OUT_I64,
        "retrive_index": OUT_I64, "retrive_next_token": OUT_I64,
        "retrive_next_sibling": OUT_I64, "draft_tokens": OUT_I64},
    "convert_logits_to_probas": {
        "logits": F32, "temperatures": ROWS_F32, "target_probs": OUT_F32,
        "target_predict": OUT_I64, "top_ks": I64},
    "draft_tree_reject_sample": {
        "predicts": OUT_I32, "accept_index": OUT_I32, "accept_token_num": OUT_I32,
        "candidates": I64, "retrive_index": I64, "retrive_next_token": I64,
        "retrive_next_sibling": I64, "seeds": I64, "target_probs": F32,
        "draft_probs": OUT_F32},
    "update_verify_result": {
        "accept_index": I32, "accept_token_num": I32, "predicts": I32, "out_cache_loc": I64,
        "req_pool_indices": I64, "max_seq_lens": I64, "seq_lens": OUT_I64,
        "req_to_token": OUT_I64, "accept_length": OUT_I32, "verified_id": OUT_I32,
        "next_root": OUT_I64, "evict_mask": OUT_BOOL, "finished": OUT_BOOL},
    "compute_kv_indices": {
        "req_to_token": I64, "req_pool_indices": I64, "kv_start": I64, "kv_len": I64,
        "kv_indptr": OUT_I64, "kv_indices": OUT_I64},
    "assign_draft_cache_locs": {
        "req_to_token": OUT_I64, "req_pool_indices": I64, "seq_lens": I64,
        "out_cache_loc": I64},
    "assign_req_to_token_pool": {
        "req_pool_indices": I64, "req_to_token": OUT_I64, "start_offset": I64,
        "end_offset": I64, "out_cache_loc": I64},
}


def _run_on(op_name, backend) -> None:
    """Check ``backend``; ``"rtl"`` raises ``NotImplementedError`` naming what is missing."""
    check_backend(__name__, op_name, backend, BACKENDS, RTL_MISSING)


def _convert(name, value, spec):
    """``value`` as the golden takes it under ``spec`` (see ``I64`` and the others above):
    an array, or an :class:`host.arrays.Output` for outputs."""
    kind = spec[0]
    if kind == "int":
        return int_input(name, value, spec[1])
    if kind == "exact":
        return exact_input(name, value, spec[1])
    if kind == "rows":
        array = exact_input(name, value, spec[1])
        return array.reshape(-1) if array.ndim == 2 and array.shape[1] == 1 else array
    if kind == "any":
        return host_array(name, value)[0]
    if kind == "out":
        return output(name, value, spec[1], spec[2])
    array, _ = host_array(name, value, writable=True)  # "out_same"
    return output(name, value, array.dtype)


def _drop_in(golden_op):
    """The drop-in of ``golden_op``: its signature plus the keyword ``backend``; arrays
    converted as :data:`_ARRAYS` says (``None`` passed on as ``None``), outputs committed
    after the golden returned."""
    name = golden_op.__name__
    arrays = _ARRAYS[name]
    signature = inspect.signature(golden_op)
    backend = inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, default="golden")
    signature = signature.replace(parameters=[*signature.parameters.values(), backend])

    def op(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = dict(bound.arguments)
        _run_on(name, call.pop("backend"))
        outs = []
        for arg, value in call.items():
            if arg in arrays and value is not None:
                call[arg] = _convert(arg, value, arrays[arg])
                if isinstance(call[arg], Output):
                    outs.append(call[arg])
                    call[arg] = call[arg].work
        golden_op(**call)
        commit(*outs)

    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__signature__ = signature
    op.__doc__ = (f"CostDraftTree ``{name}``, in place: :func:`{golden_op.__module__}.{name}` "
                  "on the converted arrays (see the module docstring; arguments, order and "
                  "dtypes as the golden's, integer arrays int32 or int64).\n\n"
                  f"Golden's documentation:\n\n{inspect.getdoc(golden_op)}")
    return op


draft_tree_layer_score_index_gen_op = _drop_in(golden.draft_tree_layer_score_index_gen_op)
update_cumu_draft_state = _drop_in(golden.update_cumu_draft_state)
calculate_work_deltas = _drop_in(golden.calculate_work_deltas)
fused_tree_mask_operator = _drop_in(golden.fused_tree_mask_operator)
convert_logits_to_probas = _drop_in(golden.convert_logits_to_probas)
draft_tree_reject_sample = _drop_in(golden.draft_tree_reject_sample)
update_verify_result = _drop_in(golden.update_verify_result)
compute_kv_indices = _drop_in(verify_metadata.compute_kv_indices)
assign_draft_cache_locs = _drop_in(verify_metadata.assign_draft_cache_locs)
assign_req_to_token_pool = _drop_in(verify_metadata.assign_req_to_token_pool)
