"""host.cost_draft_tree: the CostDraftTree ops called positionally and by keyword, with int32
and int64 integer arrays, compared bit for bit (floats by bit pattern) with a direct call of
the golden on identical copies of the inputs; refused input leaves every output unchanged."""

import inspect
import re

import numpy as np
import pytest
from test_golden_reject_sample import make_case
from test_golden_score import _outputs, _random_inputs
from test_golden_update_state import random_case
from test_golden_verify_result import base_args

import golden
from golden import verify_metadata
from host import cost_draft_tree

# --- cases: every argument of the op by name, integer arrays in the golden's dtypes ----------


def score_case():
    rng = np.random.default_rng(1)
    b, k, w, h = 2, 4, 3, 5
    case = {**_random_inputs(rng, b, k, w, h), **_outputs(b, k, w, h)}
    case.update(batch_size=b, node_top_k=k, tree_width=w, cumu_count=7, use_hot_token_id=1)
    return case


def update_state_case():
    case = random_case(np.random.default_rng(2), topk_indexs=[[0, 3, 5], [1, 2, 9]])
    return case


def work_deltas_case():
    rng = np.random.default_rng(3)
    k, maxv = 3, 4
    scores = -np.sort(-rng.random((2, maxv + k), dtype=np.float32), axis=1)
    return {"work_scores": scores, "work_deltas": np.full(k + 1, -5.0, np.float32),
            "batch_size": 2, "node_top_k": k, "cumu_count": 3, "verify_num": 4,
            "max_verify_num": maxv}


def tree_mask_case():
    parents = [-1, 0, 0, 1, 2, 1]
    scores = np.array([1.0, 0.6, 0.3, 0.5, 0.2, 0.4], np.float32)
    b, maxn, count, n = 2, 8, len(parents), 4
    case = {name: np.full((b, maxn), fill, dtype) for name, fill, dtype in (
        ("cumu_tokens", -5, np.int64), ("cumu_scores", 0.0, np.float32),
        ("cumu_deltas", -1, np.int64), ("prev_indexs", -1, np.int64),
        ("next_indexs", -2, np.int64), ("side_indexs", -3, np.int64))}
    for r in range(b):
        case["cumu_tokens"][r, :count] = 100 * (r + 1) + np.arange(count)
        case["cumu_scores"][r, :count] = scores
        case["prev_indexs"][r, :count] = parents
    case.update(seq_lens=np.array([3, 9], np.int64), batch_size=b, cumu_count=count,
                verify_num=n, max_node_count=maxn, tree_mask_mode=1,
                tree_mask=np.arange(b * n * n) % 3 == 1,
                positions=np.full(b * n, -777, np.int64),
                retrive_index=np.full((b, n), -777, np.int64),
                retrive_next_token=np.full((b, n), -777, np.int64),
                retrive_next_sibling=np.full((b, n), -777, np.int64),
                draft_tokens=np.full(b * n, -777, np.int64))
    return case


def logits_case():
    rng = np.random.default_rng(4)
    b, n, vocab = 2, 3, 7
    return {"logits": rng.normal(size=(b * n, vocab)).astype(np.float32),
            "temperatures": np.array([0.0, 0.7], np.float32), "num_draft_tokens": n,
            "target_probs": np.full((b * n, vocab), -1.0, np.float32),
            "target_predict": np.full(b * n, -1, np.int64),
            "top_ks": np.array([-1, 3], np.int64)}


def reject_case():
    case = make_case(np.random.default_rng(5), 3, 6, 4, 8)
    del case["uniform_samples"], case["uniform_samples_for_final_sampling"]
    case.update(seeds=np.array([0, 17, 2**31 - 1], np.int64), threshold_single=0.05,
                threshold_acc=0.5, deterministic=True)
    return case


def kv_indices_case():
    return {"req_to_token": np.arange(30, dtype=np.int64).reshape(3, 10) + 100,
            "req_pool_indices": np.array([2, 0], np.int64),
            "kv_start": np.array([1, 4], np.int64), "kv_len": np.array([3, 5], np.int64),
            "kv_indptr": np.full(3, -1, np.int64), "kv_indices": np.full(8, -1, np.int64)}


def draft_cache_case():
    return {"req_to_token": np.full((3, 10), -1, np.int64),
            "req_pool_indices": np.array([1, 2], np.int64),
            "seq_lens": np.array([2, 5], np.int64),
            "out_cache_loc": np.arange(6, dtype=np.int64) + 40, "S": 3}


def req_to_token_case():
    return {"req_pool_indices": np.array([0, 2], np.int64),
            "req_to_token": np.full((3, 10), -1, np.int64),
            "start_offset": np.array([1, 4], np.int64), "end_offset": np.array([3, 9], np.int64),
            "out_cache_loc": np.arange(7, dtype=np.int64) + 60}


# op name -> (golden, case, the outputs (in/out included), one refused change and its message)
OPS = {
    "draft_tree_layer_score_index_gen_op": (
        golden.draft_tree_layer_score_index_gen_op, score_case,
        ("topk_tokens_sampling", "curr_layer_scores", "sort_layer_scores",
         "sort_layer_indices", "cache_topk_indices", "parent_indices_in_layer",
         "output_hidden_states"),
        {"node_top_k": 0}, "node_top_k"),
    "update_cumu_draft_state": (
        golden.update_cumu_draft_state, update_state_case,
        ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
         "side_indexs", "output_scores", "output_tokens", "work_scores", "sort_scores",
         "output_tree_mask"),
        {"parent_indexs": np.full((2, 4), 7, np.int64)}, "parent_indexs"),
    "calculate_work_deltas": (
        golden.calculate_work_deltas, work_deltas_case, ("work_deltas",),
        {"work_scores": np.zeros((2, 6), np.float32)}, "work_scores"),
    "fused_tree_mask_operator": (
        golden.fused_tree_mask_operator, tree_mask_case,
        ("tree_mask", "positions", "retrive_index", "retrive_next_token",
         "retrive_next_sibling", "draft_tokens"),
        {"seq_lens": np.array([3, -1], np.int64)}, "seq_lens"),
    "convert_logits_to_probas": (
        golden.convert_logits_to_probas, logits_case, ("target_probs", "target_predict"),
        {"temperatures": np.array([0.0, -1.0], np.float32)}, "temperatures"),
    "draft_tree_reject_sample": (
        golden.draft_tree_reject_sample, reject_case,
        ("predicts", "accept_index", "accept_token_num", "draft_probs"),
        {"threshold_acc": 2.0}, "threshold_acc"),
    "update_verify_result": (
        golden.update_verify_result, base_args,
        ("seq_lens", "req_to_token", "accept_length", "verified_id", "next_root",
         "evict_mask", "finished"),
        {"req_pool_indices": np.array([1, 1], np.int64)}, "req_pool_indices"),
    "compute_kv_indices": (
        verify_metadata.compute_kv_indices, kv_indices_case, ("kv_indptr", "kv_indices"),
        {"kv_len": np.array([3, 7], np.int64)}, "kv_start"),
    "assign_draft_cache_locs": (
        verify_metadata.assign_draft_cache_locs, draft_cache_case, ("req_to_token",),
        {"seq_lens": np.array([2, 8], np.int64)}, "seq_lens"),
    "assign_req_to_token_pool": (
        verify_metadata.assign_req_to_token_pool, req_to_token_case, ("req_to_token",),
        {"end_offset": np.array([3, 11], np.int64)}, "start_offset"),
}


# --- helpers ----------------------------------------------------------------------------------


def copied(case):
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in case.items()}


def as_int(case, dtype):
    """The case with every integer array in ``dtype``."""
    return {k: v.astype(dtype) if isinstance(v, np.ndarray) and v.dtype.kind in "iu" else v
            for k, v in copied(case).items()}


def bits(array):
    """``array``'s bytes, floats as their bit pattern."""
    return np.ascontiguousarray(array).tobytes()


def positional(golden_op, case):
    """The case's arguments in the golden's ABI order (keyword-only ones left out)."""
    return [case[p.name] for p in inspect.signature(golden_op).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD]


def golden_reference(golden_op, case):
    """The golden called directly on copies of the case."""
    ref = copied(case)
    golden_op(*positional(golden_op, ref))
    return ref


def assert_equal_to_golden(got, ref, outputs):
    for name in outputs:
        expected = ref[name]
        actual = np.asarray(got[name]).astype(expected.dtype)
        assert actual.shape == expected.shape, name
        assert bits(actual) == bits(expected), name


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("form", ["positional", "keyword"])
@pytest.mark.parametrize("name", list(OPS))
def test_op_equals_golden(name, form, dtype):
    golden_op, make, outputs, _, _ = OPS[name]
    case = make()
    ref = golden_reference(golden_op, case)
    got = as_int(case, dtype)
    op = getattr(cost_draft_tree, name)
    if form == "positional":
        op(*positional(golden_op, got))
    else:
        op(**got)
    assert_equal_to_golden(got, ref, outputs)
    changed = [k for k in outputs if bits(ref[k]) != bits(case[k])]
    assert changed  # the case makes the op write something


@pytest.mark.parametrize("name", list(OPS))
def test_refused_input_writes_nothing(name):
    _, make, outputs, change, message = OPS[name]
    case = make()
    case.update(change)
    before = copied(case)
    with pytest.raises(ValueError, match=message):
        getattr(cost_draft_tree, name)(**case)
    for k in outputs:
        assert bits(case[k]) == bits(before[k]), k


@pytest.mark.parametrize("name", list(OPS))
def test_rtl_backend_names_what_is_missing(name):
    _, make, outputs, _, _ = OPS[name]
    case = make()
    before = copied(case)
    with pytest.raises(NotImplementedError, match=re.escape(cost_draft_tree.RTL_MISSING[name])):
        getattr(cost_draft_tree, name)(**case, backend="rtl")
    with pytest.raises(ValueError, match="`backend`"):
        getattr(cost_draft_tree, name)(**case, backend="card")
    for k in outputs:
        assert bits(case[k]) == bits(before[k]), k


def test_signatures_are_the_goldens_plus_backend():
    for name, (golden_op, *_) in OPS.items():
        params = list(inspect.signature(getattr(cost_draft_tree, name)).parameters)
        assert params == [*inspect.signature(golden_op).parameters, "backend"]


def test_value_too_wide_for_an_int32_output_is_refused_unwritten():
    case = as_int(kv_indices_case(), np.int32)
    case["req_to_token"] = case["req_to_token"].astype(np.int64) + 2**31
    before = copied(case)
    with pytest.raises(ValueError, match="kv_indices"):
        cost_draft_tree.compute_kv_indices(**case)
    assert bits(case["kv_indptr"]) == bits(before["kv_indptr"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPS))
def test_torch_cpu_tensors_in_place(name):
    torch = pytest.importorskip("torch")
    golden_op, make, outputs, _, _ = OPS[name]
    case = make()
    ref = golden_reference(golden_op, case)
    tensors = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
               for k, v in as_int(case, np.int32).items()}
    getattr(cost_draft_tree, name)(*positional(golden_op, tensors))
    assert_equal_to_golden({k: tensors[k].numpy() for k in outputs}, ref, outputs)


def test_temperatures_as_sglang_passes_them():
    """SGLang's ``sampling_info.temperatures`` is [bs, 1]: the same outputs as [bs]."""
    flat, column = logits_case(), logits_case()
    column["temperatures"] = column["temperatures"].reshape(-1, 1)
    cost_draft_tree.convert_logits_to_probas(**flat)
    cost_draft_tree.convert_logits_to_probas(**column)
    for name in ("target_probs", "target_predict"):
        assert flat[name].tobytes() == column[name].tobytes(), name
